"""The one place an engine is made from the options (lsp_server/options.py): the local engine,
or with `endpoint` the remote one. Every command that loads a model goes through here."""
from __future__ import annotations

from collections.abc import Mapping

from lsp_server.options import BY_NAME


def open_engine(options: Mapping[str, object]):
    """An engine for `options` ({option name: value}; missing ones take the table's default).
    Raises EngineError with one clear line when the options cannot work."""
    o = {name: options.get(name, opt.default) for name, opt in BY_NAME.items()}
    if o["endpoint"]:
        from engine.remote import RemoteEngine

        return RemoteEngine.load(o["endpoint"], o["model"], o["tokenizer"], o["apiKeyEnv"],
                                 o["allowInsecure"], o["connectTimeoutS"], o["readTimeoutS"])
    from engine.engine import Engine

    return Engine.load(o["model"], o["draft"], o["dtype"], o["backend"], o["threads"])
