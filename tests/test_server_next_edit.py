"""`draftline/nextEdit` over stdio (pytest-lsp, the embedded model in fp32): the answer's
shape and version, refusal for another version, cancellation by typing and by inline
completion, bad params answered with an error, and the nextEdit setting."""
import asyncio
import os
import sys

import pytest
import pytest_lsp
from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pytest_lsp import ClientServerConfig, LanguageClient

from tests.models import SMALL

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.integration]

SERVER = [sys.executable, "-m", "lsp_server.cli", "--stdio", "--threads", "2", "--model", SMALL]
ENV = dict(os.environ, OMP_WAIT_POLICY="PASSIVE")
OPTIONS = {"dtype": "fp32", "timeBudgetMs": 0, "maxTokens": 16}
CODE = ("def area(width, height):\n    return width * height\n\n\n"
        "def perimeter(width, height):\n    return 2 * (width + height)\n")


@pytest_lsp.fixture(config=ClientServerConfig(server_command=SERVER, server_env=ENV), scope="module")
async def client(lsp_client: LanguageClient):
    lsp_client.feature("draftline/status")(lambda params: None)
    await lsp_client.initialize_session(types.InitializeParams(
        capabilities=types.ClientCapabilities(), initialization_options=OPTIONS))
    for _ in range(600):  # wait for the background model load
        state = await lsp_client.workspace_execute_command_async(types.ExecuteCommandParams(command="draftline.stats"))
        if state["state"] == "ready":
            break
        await asyncio.sleep(0.2)
    yield
    await lsp_client.shutdown_session()


def open_edited(client: LanguageClient, name: str) -> str:
    """Open CODE and rename the first function's parameters by two keystroke-like changes (version 3)."""
    uri = f"file:///tmp/draftline-next-edit/{name}"
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        types.TextDocumentItem(uri=uri, language_id="python", version=1, text=CODE)))
    for version, (line, start, end, text) in enumerate([(0, 9, 24, "w, h):"), (1, 11, 25, "w * h")], start=2):
        client.text_document_did_change(types.DidChangeTextDocumentParams(
            types.VersionedTextDocumentIdentifier(uri=uri, version=version),
            [types.TextDocumentContentChangePartial(
                range=types.Range(types.Position(line, start), types.Position(line, end)), text=text)]))
    return uri


def plain(value):
    """pygls's answer object (a namedtuple per JSON object) as dicts."""
    return {k: plain(v) for k, v in value._asdict().items()} if hasattr(value, "_asdict") else value


async def ask(client: LanguageClient, uri: str, version: int, line: int = 1) -> dict | None:
    return plain(await client.protocol.send_request_async("draftline/nextEdit", {
        "textDocument": {"uri": uri}, "position": {"line": line, "character": 0}, "version": version}))


async def test_the_edit_is_for_the_asked_version(client: LanguageClient):
    uri = open_edited(client, "a.py")
    edit = await ask(client, uri, 3)
    # The small model proposes an edit here (which the cancellation tests below rely on: they
    # would pass vacuously if it proposed none).
    assert edit is not None and edit["version"] == 3 and isinstance(edit["text"], str)
    start, end = edit["start"], edit["end"]
    assert (start["line"], start["character"]) <= (end["line"], end["character"]) and 4 <= start["line"] <= end["line"] <= 5
    assert await ask(client, uri, 2) is None  # another version: refused


async def test_typing_cancels_a_prediction(client: LanguageClient):
    uri = open_edited(client, "b.py")
    pending = asyncio.ensure_future(ask(client, uri, 3))
    await asyncio.sleep(0.05)
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        types.VersionedTextDocumentIdentifier(uri=uri, version=4),
        [types.TextDocumentContentChangePartial(
            range=types.Range(types.Position(5, 0), types.Position(5, 0)), text="#")]))
    assert await pending is None


async def test_inline_completion_goes_first(client: LanguageClient):
    uri = open_edited(client, "c.py")
    pending = asyncio.ensure_future(ask(client, uri, 3))
    await asyncio.sleep(0.05)
    items = await client.text_document_inline_completion_async(types.InlineCompletionParams(
        text_document=types.TextDocumentIdentifier(uri), position=types.Position(5, 31),
        context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Automatic)))
    assert await pending is None  # the completion's job cancelled the prediction
    assert items is None or isinstance(items, types.InlineCompletionList)


@pytest.mark.parametrize("params", [{}, {"textDocument": {"uri": 3}, "position": {"line": 0}, "version": 1},
                                    {"textDocument": {"uri": "x"}, "position": {"line": -1}, "version": 1}])
async def test_bad_params_get_an_error(client: LanguageClient, params):
    with pytest.raises(JsonRpcException):
        await client.protocol.send_request_async("draftline/nextEdit", params)


async def test_unknown_document_and_the_setting_off(client: LanguageClient):
    assert await ask(client, "file:///tmp/draftline-next-edit/none.py", 1) is None
    uri = open_edited(client, "d.py")
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"nextEdit": False}))
    assert await ask(client, uri, 3) is None
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"nextEdit": True}))
