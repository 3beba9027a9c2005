"""The remote backend: Draftline as the editor-side client of an OpenAI-compatible server."""
from engine.remote.client import Endpoint, RemoteError
from engine.remote.engine import RemoteEngine

__all__ = ["Endpoint", "RemoteEngine", "RemoteError"]
