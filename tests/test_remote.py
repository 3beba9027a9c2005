"""The remote engine against real servers: llama.cpp's OpenAI-compatible server
(llama-cpp-python) serving the embedded GGUF on this CPU, and stdlib HTTP servers on loopback
that answer the ways servers go wrong. No mocks: every byte crosses a socket."""
import asyncio
import os
import sys
import tempfile
import threading
import time

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

from engine.api import Request
from engine.remote import Endpoint, RemoteEngine, RemoteError
from engine.remote.engine import FimTexts
from lsp_server.completion.prompt import Cursor, build_prompt
from lsp_server.completion.cleanup import stop_rule
from tests.remote_servers import SERVED_NAME, LlamaServer, StubServer, free_port, needs_llama_server

pytestmark = pytest.mark.integration  # remote servers: llama.cpp's and stub HTTP servers

in_lsp_loop = pytest.mark.asyncio(loop_scope="module")  # the async tests share one server

KEY_VAR, WRONG_KEY_VAR = "DRAFTLINE_TEST_KEY", "DRAFTLINE_TEST_WRONG_KEY"
KEY, WRONG_KEY = "sk-draftline-test-0123456789", "sk-wrong-9876543210"
# The language server's stderr (its log) goes to a file, to check that no key is ever in it.
SERVER_LOG = os.path.join(tempfile.gettempdir(), f"draftline-remote-test-{os.getpid()}.log")
SERVER = ["/bin/sh", "-c", f'exec "{sys.executable}" -m lsp_server.cli --stdio --threads 2 2>"{SERVER_LOG}"']
ENV = dict(os.environ, **{KEY_VAR: KEY, WRONG_KEY_VAR: WRONG_KEY})
AUTO = types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Automatic)
# No time budget: the text must not depend on this CPU's speed.
OPTIONS = {"model": SERVED_NAME, "timeBudgetMs": 0, "maxTokens": 32, "readTimeoutS": 60}


@pytest.fixture(scope="session")
def llama(tmp_path_factory):
    """One real llama.cpp server for the whole test run (the embedded model, 2 threads)."""
    if not needs_llama_server.args[0]:
        server = LlamaServer(tmp_path_factory.mktemp("llama-logs")).start()
        yield server
        server.stop()
    else:
        pytest.skip(needs_llama_server.kwargs["reason"])


# --- the client on its own ----------------------------------------------------------------------
def test_an_api_key_never_goes_over_plain_http_to_another_host(monkeypatch):
    monkeypatch.setenv(KEY_VAR, KEY)
    with pytest.raises(RemoteError, match="refusing to send the API key over plain http") as exc:
        Endpoint.parse("http://gpu-box.example:8000", KEY_VAR)
    assert KEY not in str(exc.value)
    assert Endpoint.parse("http://gpu-box.example:8000", KEY_VAR, allow_insecure=True).api_key == KEY
    assert Endpoint.parse("https://gpu-box.example", KEY_VAR).base == "https://gpu-box.example/v1"
    assert Endpoint.parse("http://127.0.0.1:8000/v1/", KEY_VAR).base == "http://127.0.0.1:8000/v1"
    monkeypatch.delenv(KEY_VAR)
    with pytest.raises(RemoteError, match=f"\\${KEY_VAR} is not set"):
        Endpoint.parse("https://gpu-box.example", KEY_VAR)
    with pytest.raises(RemoteError, match="not an http"):
        Endpoint.parse("gpu-box:8000")


def test_with_the_served_models_tokenizer_the_fim_prompt_is_the_local_engines():
    from pathlib import Path

    from engine.tokenization import load_tokenizer

    vocab = Path(__file__).parent.parent / ".cache" / "llama-vocab" / "ggml-vocab-starcoder.gguf"
    if not vocab.exists():
        pytest.skip("the starcoder vocabulary comes with `make test` (.cache/llama-vocab)")
    tok = load_tokenizer(str(vocab))
    engine = RemoteEngine(Endpoint.parse("http://127.0.0.1:9"), local_tokenizer=tok)
    ids = build_prompt(Cursor("def add(a, b):\n    return ", "\n\nprint(add(1, 2))\n"), tok, 32768)
    assert isinstance(ids, list)  # token ids, built exactly as for the local engine
    assert engine.prompt_text(ids) == ("<fim_prefix>def add(a, b):\n    return <fim_suffix>"
                                       "\n\nprint(add(1, 2))\n<fim_middle>")


def test_without_a_tokenizer_the_servers_own_fim_tokens_are_used():
    stub = StubServer("ok", fim=True)
    try:
        engine = RemoteEngine.load(stub.url)
        assert engine.problem is None and engine.served.model == "stub-model"
        assert engine.served.fim == FimTexts("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>")
        prompt = build_prompt(Cursor("x = ", "\ny = 2\n"), engine.tokenizer, engine.max_len)
        assert engine.complete(prompt, Request(8)).text == " x x x"
        sent = [body for path, body in stub.requests if path == "/v1/completions"][-1]
        assert sent["prompt"] == "<|fim_prefix|>x = <|fim_suffix|>\ny = 2\n<|fim_middle|>"
        assert sent["model"] == "stub-model" and sent["stream"] is True
    finally:
        stub.close()


def test_a_silent_server_is_a_read_timeout_and_a_cancel_does_not_wait_for_it():
    stub = StubServer("silent")
    try:
        engine = RemoteEngine.load(stub.url, read_timeout_s=0.5)
        started = time.perf_counter()
        with pytest.raises(RemoteError, match="did not answer within 0.5 s"):
            engine.complete("x = ", Request(8))
        assert time.perf_counter() - started < 2  # not retried: the server may be working
        cancel = threading.Event()
        threading.Timer(0.2, cancel.set).start()
        engine = RemoteEngine.load(stub.url)  # read timeout 30 s: only the cancel ends it
        started = time.perf_counter()
        assert engine.complete("x = ", Request(8, cancel=cancel)).stats.stop_reason == "cancelled"
        assert time.perf_counter() - started < 1
    finally:
        stub.close()


@needs_llama_server
def test_stop_rule_cuts_the_stream_and_the_server_stops(llama):
    engine = RemoteEngine.load(llama.url, SERVED_NAME)
    assert engine.problem is None and engine.served.fim is None  # SmolLM2 has no FIM tokens
    prompt = "def fibonacci(n):\n    if n < 2:\n        return n\n    return"
    reference = llama.complete(prompt, 48)
    finished, disconnected = llama.finished(), llama.disconnected()
    result = engine.complete(prompt, Request(48, stop=stop_rule(False, "    return")))
    assert result.text == reference.split("\n")[0] and result.stats.stop_reason == "stop"
    for _ in range(50):  # the server notices at its next token
        if llama.disconnected() > disconnected:
            break
        time.sleep(0.1)
    assert llama.disconnected() == disconnected + 1 and llama.finished() == finished


@needs_llama_server
def test_a_cancelled_request_closes_its_stream_at_once(llama):
    engine = RemoteEngine.load(llama.url, SERVED_NAME)
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    started = time.perf_counter()
    result = engine.complete("class Stack:\n", Request(400, cancel=cancel))
    assert result.stats.stop_reason == "cancelled"
    assert time.perf_counter() - started < 1.0


# --- end to end through the language server ------------------------------------------------------
@pytest_lsp.fixture(config=ClientServerConfig(server_command=SERVER, server_env=ENV), scope="module")
async def client(lsp_client: LanguageClient, llama):
    statuses = lsp_client.statuses = []
    lsp_client.feature("draftline/status")(lambda params: statuses.append(params))
    await lsp_client.initialize_session(types.InitializeParams(
        capabilities=types.ClientCapabilities(),
        initialization_options=OPTIONS | {"endpoint": llama.url}))
    await stats_when(lsp_client, lambda s: s["state"] == "ready")
    yield
    await lsp_client.shutdown_session()
    if os.path.exists(SERVER_LOG):
        os.remove(SERVER_LOG)


async def stats(client: LanguageClient) -> dict:
    return await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="draftline.stats"))


async def stats_when(client: LanguageClient, ready, timeout_s: float = 60) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if ready(s := await stats(client)):
            return s
        await asyncio.sleep(0.1)
    raise AssertionError(f"never reached: {s}")


async def configure(client: LanguageClient, **changes) -> None:
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(
        settings=OPTIONS | changes))
    await stats_when(client, lambda s: s["state"] != "loading" and s["endpoint"] == changes.get("endpoint"))


def open_doc(client: LanguageClient, name: str, text: str) -> str:
    uri = f"file:///tmp/draftline-remote/{name}"
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)))
    return uri


def ask(client: LanguageClient, uri: str, line: int, character: int):
    return client.text_document_inline_completion_async(types.InlineCompletionParams(
        text_document=types.TextDocumentIdentifier(uri), position=types.Position(line, character),
        context=AUTO))


def suggestion(result, line_before: str) -> str | None:
    return result.items[0].insert_text[len(line_before):] if result else None


@in_lsp_loop
@needs_llama_server
async def test_a_completion_arrives_from_the_remote_server(client, llama):
    text = "def fibonacci(n):\n    if n < 2:\n        return n\n    return"
    uri = open_doc(client, "fib.py", text)
    got = suggestion(await ask(client, uri, 3, 10), "    return")
    assert got and got == llama.complete(text, 32).split("\n")[0].rstrip()
    s = await stats(client)
    assert s["state"] == "ready" and s["dtype"] == "remote" and s["generated"] >= 1


@in_lsp_loop
@needs_llama_server
async def test_a_keystroke_storm_is_all_answered_and_the_server_finishes_few(client, llama):
    head = "import math\n\n\ndef circle_area(radius):\n"
    typed = "    return math.pi * radius ** 2 if radius > 0 else 0."  # 52 characters
    typed = typed[:40]
    uri = open_doc(client, "storm.py", head)
    before = (llama.finished(), llama.disconnected(), llama.completion_requests())
    pending, version = [], 1
    for i, ch in enumerate(typed):
        version += 1
        client.text_document_did_change(types.DidChangeTextDocumentParams(
            types.VersionedTextDocumentIdentifier(version=version, uri=uri),
            [types.TextDocumentContentChangePartial(range=types.Range(
                types.Position(4, i), types.Position(4, i)), text=ch)]))
        pending.append(asyncio.ensure_future(ask(client, uri, 4, i + 1)))
        await asyncio.sleep(0.03)
    answers = await asyncio.wait_for(asyncio.gather(*pending), 120)
    assert len(answers) == 40
    assert suggestion(answers[-1], typed)  # the last one, nobody superseded it, has text
    await asyncio.sleep(1.0)
    finished = llama.finished() - before[0]
    reached = llama.completion_requests() - before[2]
    stopped = llama.disconnected() - before[1]
    print(f"storm: 40 requests, {reached} reached the server, it finished {finished}, "
          f"stopped {stopped} streams Draftline closed")
    # How many requests a newer keystroke supersedes depends on the machine's speed; whatever
    # it is, a superseded request's stream is closed, never left to run to its end: the server
    # finishes at most the requests Draftline did not cancel.
    cancelled = (await stats(client))["cancelled"]
    assert finished <= 40 - cancelled, (finished, cancelled, reached, stopped)


@in_lsp_loop
@needs_llama_server
async def test_server_killed_mid_stream_then_restarted(client, tmp_path):
    own = LlamaServer(tmp_path).start()
    try:
        await configure(client, endpoint=own.url, multiline="always", maxTokens=400)
        uri = open_doc(client, "killed.py", "class Matrix:\n")
        errors = len([s for s in client.statuses if s.state == "error"])
        request = ask(client, uri, 1, 0)
        await asyncio.sleep(1.5)  # it is streaming
        own.kill()
        assert await asyncio.wait_for(request, 30) is None
        started = time.monotonic()
        for _ in range(3):  # the editor keeps working: quick empty answers
            assert await asyncio.wait_for(ask(client, uri, 1, 0), 10) is None
        assert time.monotonic() - started < 10
        new = [s for s in client.statuses if s.state == "error"][errors:]
        assert len(new) == 1, new  # one clear message, not one per keystroke
        assert "127.0.0.1" in new[0].message
        assert (await stats(client))["state"] == "error"
        own.start()
        await configure(client, endpoint=own.url, multiline="never")
        got = await asyncio.wait_for(ask(client, uri, 1, 0), 60)
        uri2 = open_doc(client, "back.py", "def square(x):\n    return")
        got = await asyncio.wait_for(ask(client, uri2, 1, 10), 60)
        assert got and (await stats(client))["state"] == "ready"
    finally:
        own.stop()


async def one_clear_failure(client, uri, endpoint, expected: str, **options) -> str:
    await configure(client, endpoint=endpoint, multiline="never", **options)
    # A new document each time: an earlier answer at the same spot would be reused (typed-through).
    uri = open_doc(client, f"failure-{len(client.statuses)}.py", "def square(x):\n    return")
    errors = len([s for s in client.statuses if s.state == "error"])
    for _ in range(3):
        assert await asyncio.wait_for(ask(client, uri, 1, 10), 20) is None
    new = [s for s in client.statuses if s.state == "error"][errors:]
    if not new:  # said at load: the endpoint was checked then
        new = [s for s in client.statuses if s.state == "error"][errors - 1:errors]
    assert len(new) == 1 and expected in new[0].message, (expected, new)
    assert KEY not in new[0].message and WRONG_KEY not in new[0].message
    return new[0].message


@in_lsp_loop
@needs_llama_server
async def test_failures_each_give_one_clear_message(client, llama, tmp_path):
    uri = open_doc(client, "failures.py", "def square(x):\n    return")
    await one_clear_failure(client, uri, llama.url, "'no-such-model' is not served", model="no-such-model")
    guarded = LlamaServer(tmp_path, api_key=KEY).start()
    try:
        await one_clear_failure(client, uri, guarded.url, "401 unauthorized", apiKeyEnv=WRONG_KEY_VAR)
        await configure(client, endpoint=guarded.url, apiKeyEnv=KEY_VAR, multiline="never")
        assert await asyncio.wait_for(ask(client, uri, 1, 10), 60)  # the right key works
    finally:
        guarded.stop()
    for behaviour, expected in [("error", "HTTP 500: CUDA out of memory"),
                                ("malformed", "malformed event"),
                                ("no-text", "malformed completion"),
                                ("endless", "did not end after")]:
        stub = StubServer(behaviour)
        try:
            await one_clear_failure(client, uri, stub.url, expected, model="stub-model")
        finally:
            stub.close()
    await one_clear_failure(client, uri, f"http://127.0.0.1:{free_port()}/v1", "connection refused")
    await configure(client, endpoint=llama.url, multiline="never")  # and back: it works again
    assert await asyncio.wait_for(ask(client, uri, 1, 10), 60)
    assert (await stats(client))["state"] == "ready"
    with open(SERVER_LOG) as log:  # the server logged the 401, never a key
        text = log.read()
    assert "401 unauthorized" in text and KEY not in text and WRONG_KEY not in text


@in_lsp_loop
@needs_llama_server
async def test_snippets_sent_to_a_server_never_come_from_secret_files(client):
    stub = StubServer("ok")
    try:
        await configure(client, endpoint=stub.url, model="stub-model", multiline="never")
        open_doc(client, "geometry.py", "def area_of_square(side):\n    return side * side\n")
        open_doc(client, ".env", "SQUARE_API_TOKEN=hunter2-area-of-square-side\n")
        uri = open_doc(client, "main.py", "import geometry\n\n\ndef area_of_square(side):\n    return")
        assert await asyncio.wait_for(ask(client, uri, 4, 10), 20)
        prompt = [body for path, body in stub.requests if path == "/v1/completions"][-1]["prompt"]
        assert "# geometry.py" in prompt and "hunter2" not in prompt
    finally:
        stub.close()


@needs_llama_server
def test_bench_measures_the_remote_path(llama, capsys, tmp_path):
    from pathlib import Path

    from lsp_server.cli import main

    examples = Path(__file__).parent.parent / "examples"
    report = tmp_path / "remote.json"
    assert main(["bench", "--endpoint", llama.url, "--model", SERVED_NAME, "--tasks", "2",
                 "--max-new-tokens", "8", "--workload", "fresh", "--json", str(report), str(examples)]) == 0
    out = capsys.readouterr().out
    assert "remote" in out and "p50 ms" in out
    import json

    numbers = json.loads(report.read_text())["workloads"]["fresh"]["modes"]["remote"]
    assert numbers["completions"] == 2 and numbers["p50_ms"] > 0 and numbers["tokens_per_s"] > 0


@needs_llama_server
def test_cli_complete_takes_the_remote_path(llama, capsys, tmp_path):
    from lsp_server.cli import main

    source = tmp_path / "fib.py"
    source.write_text("def fibonacci(n):\n    if n < 2:\n        return n\n    return\n")
    assert main(["--endpoint", llama.url, "complete", str(source), "--line", "3", "--col", "10",
                 "--model", SERVED_NAME]) == 0
    out = capsys.readouterr()
    shown = out.out.rstrip("\n")
    assert shown and shown == llama.complete(source.read_text()[:-1], 32).split("\n")[0].rstrip()
    assert f"ms from {llama.url}" in out.err and "target passes" not in out.err  # the server decodes
