"""End to end over stdio with pytest-lsp: one real `lsp_server --stdio` process (fp32
embedded model) for the whole module."""
import asyncio
import sys
from pathlib import Path

import pytest
import pytest_lsp
from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pytest_lsp import ClientServerConfig, LanguageClient

from engine.api import Request
from lsp_server.completion.typed_through import next_indent
from lsp_server.options import Settings

from tests.models import SMALL

# The server over stdio, driven by pytest-lsp.
pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

SERVER = [sys.executable, "-m", "lsp_server.cli", "--stdio", "--threads", "2", "--model", SMALL]
# fp32 for exact greedy output; no time budget so the text does not depend on speed.
OPTIONS = {"dtype": "fp32", "timeBudgetMs": 0, "maxTokens": 48}
FIB = "def fibonacci(n):\n    if n <= 1:\n        return n\n    return "
INVOKED = types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Invoked)
AUTO = types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Automatic)


@pytest_lsp.fixture(config=ClientServerConfig(server_command=SERVER),
                    scope="module")
async def client(lsp_client: LanguageClient):
    statuses = lsp_client.statuses = []
    lsp_client.feature("draftline/status")(lambda params: statuses.append(params))
    ready = lsp_client.ready = []
    lsp_client.feature("draftline/suggestionReady")(lambda params: ready.append(params))
    result = await lsp_client.initialize_session(types.InitializeParams(
        capabilities=types.ClientCapabilities(), initialization_options=OPTIONS))
    lsp_client.capabilities_result = result.capabilities
    for _ in range(600):  # wait for the background model load
        if (await stats(lsp_client))["state"] == "ready":
            break
        await asyncio.sleep(0.2)
    yield
    await lsp_client.shutdown_session()


async def stats(client: LanguageClient) -> dict:
    return await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="draftline.stats"))


def open_doc(client: LanguageClient, name: str, text: str) -> str:
    uri = f"file:///tmp/draftline-test/{name}"
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)))
    return uri


def close_doc(client: LanguageClient, uri: str) -> None:
    client.text_document_did_close(types.DidCloseTextDocumentParams(
        types.TextDocumentIdentifier(uri)))


def inline_params(uri, line, character, context=AUTO):
    return types.InlineCompletionParams(text_document=types.TextDocumentIdentifier(uri),
                                        position=types.Position(line, character), context=context)


def end_of(text: str) -> tuple[int, int]:
    lines = text.split("\n")
    return len(lines) - 1, len(lines[-1].encode("utf-16-le")) // 2


async def test_capabilities_advertised(client: LanguageClient):
    caps = client.capabilities_result
    assert caps.inline_completion_provider is not None
    assert caps.completion_provider is not None
    assert caps.text_document_sync.change == types.TextDocumentSyncKind.Incremental
    assert {"draftline.stats", "draftline.didAccept", "draftline.toggle",
            "draftline.didShowCompletion", "draftline.didPartiallyAcceptCompletion"} <= set(
        caps.execute_command_provider.commands)
    assert [s.state for s in client.statuses][:1] == ["loading"]
    assert any(s.state == "ready" for s in client.statuses)


async def test_inline_matches_plain_greedy(client: LanguageClient, fp32_engine):
    # Independent route: plain autoregressive greedy with the engine in this process.
    expected = fp32_engine.complete(FIB, Request(max_new_tokens=48), "ar").text
    expected = expected.split("\n")[0].rstrip()
    assert expected
    uri = open_doc(client, "fib.py", FIB)
    result = await client.text_document_inline_completion_async(inline_params(uri, *end_of(FIB)))
    close_doc(client, uri)
    item = result.items[0]
    assert item.insert_text == "    return " + expected
    assert item.range == types.Range(types.Position(3, 0), types.Position(3, 11))
    assert item.command.command == "draftline.didAccept"
    assert item.command.arguments[0]["text"] == expected


async def test_incremental_change_then_completion_fallback(client: LanguageClient):
    uri = open_doc(client, "inc.py", "import os\n")
    # Type the fibonacci text through one incremental change after the first line.
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        types.VersionedTextDocumentIdentifier(uri=uri, version=2),
        [types.TextDocumentContentChangePartial(
            range=types.Range(types.Position(1, 0), types.Position(1, 0)), text=FIB)]))
    line, col = end_of("import os\n" + FIB)
    inline = await client.text_document_inline_completion_async(inline_params(uri, line, col))
    completion = await client.text_document_completion_async(types.CompletionParams(
        types.TextDocumentIdentifier(uri), types.Position(line, col)))
    close_doc(client, uri)
    suggestion = inline.items[0].insert_text[len("    return "):]
    assert inline.items[0].insert_text.startswith("    return ")  # the server saw the edit
    item = completion.items[0]
    assert item.insert_text == suggestion
    assert item.label == suggestion.split("\n")[0]


async def test_invoked_offers_a_sampled_alternative_after_the_greedy_one(client: LanguageClient):
    """An invoked request (the user asked) gets the greedy suggestion first, then a sampled
    one (temperature 0.8, seeded): in an open-ended block they differ."""
    block = "class Inventory:\n    def __init__(self):"
    uri = open_doc(client, "alt.py", block)
    automatic = await client.text_document_inline_completion_async(inline_params(uri, *end_of(block)))
    invoked = await client.text_document_inline_completion_async(
        inline_params(uri, *end_of(block), INVOKED))
    close_doc(client, uri)
    texts = [i.insert_text for i in invoked.items]
    assert len(texts) == 2 and texts[0] == automatic.items[0].insert_text != texts[1]


async def test_typed_through_answers_from_cache(client: LanguageClient):
    uri = open_doc(client, "typed.py", FIB)
    line, col = end_of(FIB)
    first = await client.text_document_inline_completion_async(inline_params(uri, line, col))
    suggestion = first.items[0].insert_text[col:]
    assert len(suggestion) >= 2
    before = await stats(client)
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        types.VersionedTextDocumentIdentifier(uri=uri, version=2),
        [types.TextDocumentContentChangePartial(
            range=types.Range(types.Position(line, col), types.Position(line, col)),
            text=suggestion[0])]))
    second = await client.text_document_inline_completion_async(inline_params(uri, line, col + 1))
    after = await stats(client)
    close_doc(client, uri)
    assert second.items[0].insert_text == first.items[0].insert_text
    assert after["cacheHits"] == before["cacheHits"] + 1
    assert after["generated"] == before["generated"]


async def test_after_a_suggestion_the_next_is_made_ahead_as_if_it_were_accepted(client: LanguageClient):
    """Tab, Enter, Tab: once requests pause, the server writes the suggestion for where accepting
    the shown line and Enter put the cursor; the request there is answered from it without a
    model run, with what an unhurried request on the accepted text gets."""
    text = "class Point:\n    def __init__(self, x, y):\n        self.x = x\n"
    uri = open_doc(client, "ahead.py", text)
    before = await stats(client)
    line, col = end_of(text)
    first = await client.text_document_inline_completion_async(inline_params(uri, line, col))
    shown = first.items[0].insert_text[col:]
    typed = shown + "\n" + next_indent(shown)  # the line taken, Enter, the editor's indentation
    for _ in range(600):
        if (await stats(client))["prefetchedNext"] > before["prefetchedNext"]:
            break
        await asyncio.sleep(0.1)
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        types.VersionedTextDocumentIdentifier(uri=uri, version=2),
        [types.TextDocumentContentChangePartial(
            range=types.Range(types.Position(line, col), types.Position(line, col)), text=typed)]))
    await client.workspace_execute_command_async(types.ExecuteCommandParams(
        command="draftline.didAccept", arguments=[{"uri": uri, "text": shown}]))
    middle = await stats(client)
    second = await client.text_document_inline_completion_async(inline_params(uri, *end_of(text + typed)))
    after = await stats(client)
    close_doc(client, uri)
    fresh = open_doc(client, "ahead2.py", text + typed)
    unhurried = await client.text_document_inline_completion_async(inline_params(fresh, *end_of(text + typed)))
    close_doc(client, fresh)
    assert shown and middle["prefetchedNext"] == before["prefetchedNext"] + 1
    assert after["generated"] == middle["generated"] and after["cacheHits"] == middle["cacheHits"] + 1
    assert second is not None and second.items[0].insert_text == unhurried.items[0].insert_text


async def test_cancel_request_returns_cancel_error_and_next_is_served(client: LanguageClient):
    busy_uri = open_doc(client, "busy.py", FIB)
    uri = open_doc(client, "cancel.py", FIB)
    # The busy request occupies the single model thread, so the next one is still waiting
    # when its $/cancelRequest arrives.
    busy = client.text_document_inline_completion_async(inline_params(busy_uri, *end_of(FIB)))
    pending = asyncio.ensure_future(client.protocol.send_request_async(  # a coroutine here
        types.TEXT_DOCUMENT_INLINE_COMPLETION, inline_params(uri, *end_of(FIB)), msg_id="to-cancel"))
    await asyncio.sleep(0.2)  # let both requests reach the server
    client.protocol.notify("$/cancelRequest", types.CancelParams(id="to-cancel"))
    with pytest.raises(JsonRpcException) as error:
        await pending
    assert error.value.code == types.LSPErrorCodes.RequestCancelled
    assert (await busy) is not None
    served = await client.text_document_inline_completion_async(inline_params(uri, *end_of(FIB)))
    close_doc(client, uri)
    close_doc(client, busy_uri)
    assert served is not None and served.items[0].insert_text.startswith("    return ")


async def test_new_request_cancels_previous_for_same_document(client: LanguageClient):
    block = "class Stack:\n    def push(self, item):"
    uri = open_doc(client, "prev.py", block)
    before = await stats(client)
    first = client.text_document_inline_completion_async(inline_params(uri, *end_of(block)))
    second = client.text_document_inline_completion_async(inline_params(uri, 0, len("class Stack:")))
    results = await asyncio.gather(first, second)
    after = await stats(client)
    close_doc(client, uri)
    assert results[0] is None and results[1] is not None
    assert after["cancelled"] == before["cancelled"] + 1
    assert after["generated"] == before["generated"] + 1


async def test_requests_for_the_same_spot_share_one_generation(client: LanguageClient):
    block = "class Queue:\n    def put(self, item):"
    uri = open_doc(client, "same.py", block)
    before = await stats(client)
    results = await asyncio.gather(*(client.text_document_inline_completion_async(
        inline_params(uri, *end_of(block))) for _ in range(2)))
    after = await stats(client)
    close_doc(client, uri)
    assert results[0] is not None and results[0] == results[1]
    assert after["generated"] == before["generated"] + 1
    assert after["cancelled"] == before["cancelled"]


async def test_budget_never_shows_a_fragment_and_finishes_in_background(client: LanguageClient):
    """A generation the time budget cuts is not shown; it goes on, the client hears when it is
    ready (editors do not ask again by themselves), and the next request at that spot gets the
    whole suggestion, equal to an unhurried run's."""
    block = "def area(width, height):\n    "
    uri = open_doc(client, "budget.py", block)
    settings = lambda budget: types.DidChangeConfigurationParams(settings={**OPTIONS, "timeBudgetMs": budget})  # noqa: E731
    client.workspace_did_change_configuration(settings(1))
    before = await stats(client)
    cut = await client.text_document_inline_completion_async(inline_params(uri, *end_of(block)))
    for _ in range(300):  # the background job finishes
        if any(r.uri == uri for r in client.ready):
            break
        await asyncio.sleep(0.1)
    ready = [r for r in client.ready if r.uri == uri]
    whole = await client.text_document_inline_completion_async(inline_params(uri, *end_of(block)))
    after = await stats(client)
    client.workspace_did_change_configuration(settings(0))
    close_doc(client, uri)
    fresh = open_doc(client, "budget2.py", block)
    unhurried = await client.text_document_inline_completion_async(inline_params(fresh, *end_of(block)))
    close_doc(client, fresh)
    assert cut is None
    assert len(ready) == 1 and (ready[0].position.line, ready[0].position.character) == end_of(block)
    assert after["continued"] == before["continued"] + 1
    assert after["cacheHits"] == before["cacheHits"] + 1
    assert whole is not None and whole.items[0].insert_text == unhurried.items[0].insert_text


def cold_prefill_ms(client: LanguageClient, ms: int | None) -> None:
    """Set coldPrefillMs (None: the default, as the other tests have it)."""
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(
        settings={**OPTIONS, "coldPrefillMs": Settings().coldPrefillMs if ms is None else ms}))


async def improved_after(client: LanguageClient, before: dict) -> dict:
    """The server's stats once it has improved one more cold answer than in `before` (or after
    a minute: the caller's assertions then say what is missing)."""
    for _ in range(600):
        if (now := await stats(client))["improvedWindows"] > before["improvedWindows"]:
            return now
        await asyncio.sleep(0.1)
    return await stats(client)


async def test_a_cold_answer_is_followed_by_the_full_windows_where_the_user_still_waits(client: LanguageClient):
    """With no time to prefill (coldPrefillMs 1), a new spot is answered from a cold window; once
    requests pause the server writes the suggestion from a wider window (three times as long to
    prefill: here as cold), then from the full window, says so where it differs, and the next
    request there gets it: the same text an unhurried request gets."""
    text = "".join(f"def square_{i}(x):\n    return x * x + {i}\n\n\n" for i in range(12)) + "def square_12(x):\n    "
    cold_prefill_ms(client, 1)
    uri = open_doc(client, "improve.py", text)
    before = await stats(client)
    cold = await client.text_document_inline_completion_async(inline_params(uri, *end_of(text)))
    after = await improved_after(client, before)
    better = await client.text_document_inline_completion_async(inline_params(uri, *end_of(text)))
    ready = [r for r in client.ready if r.uri == uri]
    close_doc(client, uri)
    cold_prefill_ms(client, 0)
    fresh = open_doc(client, "improve2.py", text)
    unhurried = await client.text_document_inline_completion_async(inline_params(fresh, *end_of(text)))
    close_doc(client, fresh)
    cold_prefill_ms(client, None)
    assert after["coldWindows"] == before["coldWindows"] + 1
    assert after["improvedWindows"] == before["improvedWindows"] + 1
    assert after["widenedWindows"] == before["widenedWindows"] + 1
    assert better is not None and better.items[0].insert_text == unhurried.items[0].insert_text
    said = cold is None or cold.items[0].insert_text != better.items[0].insert_text
    assert len(ready) == said  # told only where the screen changes


async def test_a_cold_answer_typed_through_gives_way_to_the_full_windows(client: LanguageClient):
    """The user types the first letter of a cold window's answer before it is improved: the rest,
    answered at once from the typed-through cache, stands only until the full window's answer at
    the new spot is ready, which is then the answer there (not the cold one's rest)."""
    text = "".join(f"def cube_{i}(x):\n    return x * x * x - {i}\n\n\n" for i in range(12)) + "def cube_12(x):\n    "
    cold_prefill_ms(client, 1)
    uri = open_doc(client, "typed_cold.py", text)
    line, col = end_of(text)
    cold = await client.text_document_inline_completion_async(inline_params(uri, line, col))
    assert cold is not None and len(cold.items[0].insert_text) > col + 1
    letter = cold.items[0].insert_text[col]
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        types.VersionedTextDocumentIdentifier(uri=uri, version=2),
        [types.TextDocumentContentChangePartial(
            range=types.Range(types.Position(line, col), types.Position(line, col)), text=letter)]))
    before = await stats(client)
    typed = await client.text_document_inline_completion_async(inline_params(uri, line, col + 1))
    after = await improved_after(client, before)
    better = await client.text_document_inline_completion_async(inline_params(uri, line, col + 1))
    close_doc(client, uri)
    cold_prefill_ms(client, 0)
    fresh = open_doc(client, "typed_cold2.py", text + letter)
    unhurried = await client.text_document_inline_completion_async(inline_params(fresh, *end_of(text + letter)))
    close_doc(client, fresh)
    cold_prefill_ms(client, None)
    assert typed is not None and typed.items[0].insert_text == cold.items[0].insert_text
    assert after["cacheHits"] == before["cacheHits"] + 1
    assert after["improvedWindows"] == before["improvedWindows"] + 1
    assert better is not None and better.items[0].insert_text == unhurried.items[0].insert_text


async def test_a_cold_answers_improvement_resumes_after_a_next_edit_prediction(client: LanguageClient):
    """Editors ask for a next edit at the same pause as the suggestion: that background work
    cancels the idle improvement of a cold answer, which starts again after it."""
    text = "".join(f"def half_{i}(x):\n    return x / 2 + {i}\n\n\n" for i in range(12)) + "def half_12(x):\n    "
    edited = text.replace("half_0(x)", "half_0(y)")
    cold_prefill_ms(client, 1)
    uri = open_doc(client, "resume.py", text)
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        types.VersionedTextDocumentIdentifier(uri=uri, version=2),
        [types.TextDocumentContentChangePartial(
            range=types.Range(types.Position(0, 11), types.Position(0, 12)), text="y")]))
    before = await stats(client)
    await client.text_document_inline_completion_async(inline_params(uri, *end_of(edited)))
    await asyncio.sleep(0.5)  # the improvement has started
    await client.protocol.send_request_async("draftline/nextEdit", {
        "textDocument": {"uri": uri}, "position": {"line": 0, "character": 0}, "version": 2})
    after = await improved_after(client, before)
    close_doc(client, uri)
    cold_prefill_ms(client, None)
    assert after["coldWindows"] == before["coldWindows"] + 1
    assert after["improvedWindows"] == before["improvedWindows"] + 1


async def test_a_resting_cursor_prefills_its_window_and_bad_params_are_ignored(client: LanguageClient):
    """draftline/cursor (our clients: where the cursor came to rest) prefills the window at the
    end of that line in the background; malformed params are logged, and the server serves on."""
    text = "import math\n\n\ndef area(r):\n    return math.pi * r * r\n"
    uri = open_doc(client, "rest.py", text)
    before = await stats(client)
    client.protocol.notify("draftline/cursor", {"textDocument": {"uri": uri}, "position": {"line": -1}})
    client.protocol.notify("draftline/cursor", {"position": {"line": 0}})
    client.protocol.notify("draftline/cursor", {"textDocument": {"uri": uri}, "position": {"line": 4, "character": 0}})
    for _ in range(300):
        if (await stats(client))["prefetched"] > before["prefetched"]:
            break
        await asyncio.sleep(0.1)
    after = await stats(client)
    close_doc(client, uri)
    assert after["prefetched"] == before["prefetched"] + 1  # the two malformed ones did nothing
    assert after["requests"] == before["requests"]  # a notification, not a request


async def test_cli_complete_prints_what_the_editor_gets(client: LanguageClient):
    """`lsp_server complete` takes the server's suggestion path: same prompt, stop rule and
    clean-up, so it prints the text the server answers an editor with."""
    sample = Path(__file__).parent.parent / "examples" / "shapes.py"
    text = sample.read_text()
    line, col = 24, 8
    uri = open_doc(client, "shapes.py", text)
    served = await client.text_document_inline_completion_async(inline_params(uri, line, col))
    close_doc(client, uri)
    cli = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "lsp_server.cli", "complete", str(sample), "--line", str(line),
        "--col", str(col), "--dtype", "fp32", "--max-new-tokens", str(OPTIONS["maxTokens"]),
        "--threads", "2", "--model", SMALL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    stdout, stderr = await cli.communicate()
    assert cli.returncode == 0, stderr
    line_before = text.split("\n")[line][:col]
    assert served is not None and stdout.decode() == served.items[0].insert_text[len(line_before):] + "\n"


async def test_unknown_uri_and_out_of_range_positions_are_empty(client: LanguageClient):
    assert await client.text_document_inline_completion_async(
        inline_params("file:///nowhere/missing.py", 0, 0)) is None
    uri = open_doc(client, "range.py", FIB)
    for line, col in [(99, 0), (0, 999)]:  # past the last line, past the line's end
        assert await client.text_document_inline_completion_async(
            inline_params(uri, line, col)) is None
    served = await client.text_document_inline_completion_async(inline_params(uri, *end_of(FIB)))
    close_doc(client, uri)
    assert served is not None  # still serving


async def test_emoji_positions_are_utf16(client: LanguageClient):
    text = 'GREETING = "😀 hi 😀"\nprint(GREETING + '
    uri = open_doc(client, "emoji.py", 'x = "😀😀"\n' + text)
    line, col = end_of('x = "😀😀"\n' + text)
    result = await client.text_document_inline_completion_async(inline_params(uri, line, col))
    # Position 6 of line 0 in UTF-16 is between the two emoji; 5 is inside the first one.
    inside_pair = await client.text_document_inline_completion_async(inline_params(uri, 0, 6))
    close_doc(client, uri)
    assert inside_pair is None
    item = result.items[0]
    assert item.insert_text.startswith("print(GREETING + ")
    assert item.range.end == types.Position(line, col)


async def test_accept_and_report_commands_count(client: LanguageClient):
    before = await stats(client)
    await client.workspace_execute_command_async(types.ExecuteCommandParams(
        command="draftline.didAccept", arguments=[{"uri": "file:///x.py", "text": "abc"}]))
    await client.workspace_execute_command_async(types.ExecuteCommandParams(
        command="draftline.didShowCompletion", arguments=[{"uri": "file:///x.py", "text": "abc"}]))
    with pytest.raises(JsonRpcException):
        await client.workspace_execute_command_async(types.ExecuteCommandParams(
            command="draftline.didAccept", arguments=["not an object"]))
    after = await stats(client)
    assert after["accepted"] == before["accepted"] + 1
    assert after["shown"] == before["shown"] + 1


async def test_toggle_disables_suggestions(client: LanguageClient):
    uri = open_doc(client, "toggle.py", FIB)
    off = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="draftline.toggle"))
    disabled = await client.text_document_inline_completion_async(inline_params(uri, *end_of(FIB)))
    on = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="draftline.toggle"))
    close_doc(client, uri)
    assert off == {"enabled": False} and on == {"enabled": True}
    assert disabled is None
