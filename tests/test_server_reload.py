"""A model change while the server runs: the newest settings win even when they arrive during
a load, and the new engine gets the open documents and the workspace's files."""
import asyncio
import os
import sys

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

from tests.models import SMALL

# The server over stdio, driven by pytest-lsp.
pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

SERVER = [sys.executable, "-m", "lsp_server.cli", "--stdio", "--threads", "2", "--model", SMALL]
OPTIONS = {"dtype": "fp32", "timeBudgetMs": 0, "maxTokens": 16}
WORKSPACE_FILES = 3


@pytest_lsp.fixture(config=ClientServerConfig(server_command=SERVER, server_env=dict(os.environ)),
                    scope="module")
async def client(lsp_client: LanguageClient, tmp_path_factory):
    root = tmp_path_factory.mktemp("workspace")
    for i in range(WORKSPACE_FILES):
        (root / f"module_{i}.py").write_text(f"def handler_{i}(event):\n    return event.value * {i}\n")
    await lsp_client.initialize_session(types.InitializeParams(
        capabilities=types.ClientCapabilities(), root_uri=root.as_uri(), initialization_options=OPTIONS))
    yield
    await lsp_client.shutdown_session()


async def stats_when(client: LanguageClient, ready) -> dict:
    for _ in range(900):
        stats = await client.workspace_execute_command_async(
            types.ExecuteCommandParams(command="draftline.stats"))
        if ready(stats):
            return stats
        await asyncio.sleep(0.2)
    raise AssertionError(f"never reached: {stats}")


async def test_a_change_during_a_load_is_followed_and_the_new_engine_has_the_documents(client):
    await stats_when(client, lambda s: s["state"] == "ready" and s["documents"] == WORKSPACE_FILES)
    client.text_document_did_open(types.DidOpenTextDocumentParams(types.TextDocumentItem(
        uri="file:///tmp/draftline-reload/open.py", language_id="python", version=1,
        text="def total(items):\n    return sum(items)\n")))
    change = lambda dtype: client.workspace_did_change_configuration(  # noqa: E731
        types.DidChangeConfigurationParams(settings={**OPTIONS, "dtype": dtype}))
    change("int8")
    await stats_when(client, lambda s: s["state"] == "loading")
    change("bf16")  # arrives while int8 loads: must not be dropped
    final = await stats_when(client, lambda s: s["state"] == "ready" and s["dtype"] == "bf16"
                             and s["documents"] == WORKSPACE_FILES + 1)
    assert final["model"] == SMALL
