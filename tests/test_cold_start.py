"""Cold start: prefill kernels chosen by measurement, what is kept between runs (converted
weights, tokenizer, calibration), cancellable prefill, and prompt windows sized to the
machine's measured prefill rate."""
from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import threading

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q

from engine.execution import calibrate
from engine.loading import weight_cache
from engine.execution.backends.native_llama import NativeLlama
from engine.execution.backends.torch_llama import TorchLlama
from engine.loading.formats.gguf_mapped import map_gguf
from engine.execution.plan import STORED, ExecutionPlan
from engine.execution.kernels import Int8Weight
from engine.loading.user_cache import content_key, write_atomically
from lsp_server.serving.documents import Documents
from lsp_server.options import Settings
from lsp_server.completion.suggester import MAX_AUTO_WINDOW, Plan, Suggester, auto_window, plan as plan_at
from lsp_server.completion.prompt import Budget, Cursor
from tests import gguf_files
from tests.code_samples import stdlib_text
from tests.tiny_models import random_weights

COLD_PREFILL_S = Settings.coldPrefillMs / 1000  # the default cold rule's budget


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DRAFTLINE_CACHE_DIR", str(tmp_path / "cache"))


def int8_model(copy_budget: float = 0.25) -> TorchLlama:
    """An int8 model run by the torch kernels (as where the native decoder cannot run): the
    kernels whose prefill and copies calibration chooses."""
    model = TorchLlama(random_weights(0, vocab=64, hidden=64, layers=2), torch.bfloat16,
                       max_len=256, quant="int8", copy_budget=copy_budget)
    model.native = None
    return model


def next_logits(model: TorchLlama, kernel: str, prompt: list[int]) -> np.ndarray:
    model.truncate(0)
    model.use_plan(ExecutionPlan(prefill=kernel), final=False)
    # an fp32 copy is over the memory budget, and no copy fits a budget of 0
    assert model.copy_kernel == ("bf16" if kernel == "bf16" and model.copy_budget else None)
    model.forward(prompt[:-1], logits=False)
    return model.forward(prompt[-1:])[0]


def test_every_prefill_kernel_computes_the_same_model():
    """The kernels differ in rounding only: the cache each leaves behind gives the next token's
    logits of the same int8 model (the fp32 kernel is the most precise reference)."""
    model, no_copies, prompt = int8_model(), int8_model(copy_budget=0.0), [(7 * i) % 64 for i in range(40)]
    reference = next_logits(no_copies, "fp32", prompt)
    for kernel, m in [(STORED, no_copies), ("bf16", model), ("bf16", no_copies), ("fp32", model)]:
        logits = next_logits(m, kernel, prompt)
        assert np.allclose(logits, reference, atol=0.05 * float(np.abs(reference).max()))
    # Passes that return logits (decoding, verification) use the plan's decoding kernel
    # whatever the prefill kernel, so they round alike and speculative output equals plain
    # decoding.
    model.truncate(0)
    model.use_plan(ExecutionPlan())
    model.forward(prompt[:-1], logits=False)
    by_kernel = []
    for kernel in (STORED, "fp32", "bf16"):
        model.truncate(len(prompt) - 1)
        model.use_plan(ExecutionPlan(prefill=kernel), final=False)
        by_kernel.append(model.forward(prompt[-1:])[0])
    assert all(np.array_equal(logits, by_kernel[0]) for logits in by_kernel)


def test_the_fastest_measured_kernel_is_chosen(monkeypatch):
    model = int8_model()
    seconds = {STORED: 0.004, "fp32": 0.001, "bf16": 0.002}
    monkeypatch.setattr(model, "time_prefill", lambda width: seconds[model.plan.prefill])
    cal = calibrate.measure(model, max_width=4, max_threads=1)
    assert cal.plan.prefill == "fp32" and model.plan.prefill == "fp32"
    assert cal.kernel_tokens_per_s == pytest.approx({k: 1 / s for k, s in seconds.items()})
    assert len(cal.pass_cost) == 5 and cal.prefill_tokens_per_s > 0


def test_every_pass_with_logits_runs_the_kernel_one_token_passes_run_fastest_with(monkeypatch):
    """torch's int8 kernel costs ~3x more at 13 tokens than at one; the resident bf16 copy
    does not. But a wide pass through the copy would round differently from plain decoding's
    one-token passes, so calibration gives every width the one-token pass's kernel: every
    width a tree may take is verified exactly. Where the copy is faster (by the margin) at one
    token, it serves every width."""
    model, prompt = int8_model(), [(5 * i) % 64 for i in range(30)]
    monkeypatch.setattr(model, "time_prefill", lambda width: {STORED: 2, "fp32": 3, "bf16": 1}[model.plan.prefill])
    copy_cost = {"slow": lambda w: 2.5 + w / 4, "fast": lambda w: 0.5 + w / 4}

    for one_token_copy in ("slow", "fast"):
        def costs(backend, max_width, repeats=3):  # stored: 1 + w
            stored = backend.plan.decode == STORED
            return [0.0] + [(1 + w if stored else copy_cost[one_token_copy](w)) for w in range(1, max_width + 1)]

        monkeypatch.setattr(calibrate, "measure_pass_costs", costs)
        cal = calibrate.measure(model, max_width=4, max_threads=1)
        assert model.plan == cal.plan and cal.plan.prefill == "bf16"
        if one_token_copy == "slow":
            assert cal.plan.decode == STORED and cal.pass_cost[1:] == [2, 3, 4, 5]
            assert [run["kernel"] for run in cal.plan.describe()] == [STORED, "bf16"]  # what stats show
        else:
            assert cal.plan.decode == "bf16" and cal.pass_cost[1:] == [0.75, 1.0, 1.25, 1.5]
        assert model.copy_kernel == "bf16"  # prefill reads it either way
    # with the stored format, a wide pass's logits are those of one-token passes (the copy's
    # are not: tests/test_exactness.py checks whole outputs)
    model.use_plan(dataclasses.replace(cal.plan, decode=STORED))
    model.truncate(0)
    model.forward(prompt[:-4], logits=False)
    one_by_one = [model.forward([t])[0] for t in prompt[-4:]]
    model.truncate(len(prompt) - 4)
    assert np.array_equal(model.forward(prompt[-4:]), np.stack(one_by_one))


def test_an_int4_model_prefilling_natively_keeps_only_the_packed_layout(monkeypatch):
    """Where torch's int4 kernel runs the model (no native decoder, tests/test_native.py)."""
    model = TorchLlama(random_weights(0, vocab=64, hidden=64, layers=2), torch.bfloat16,
                       max_len=256, quant="int4")
    model.native = None
    prompt = [(3 * i) % 64 for i in range(20)]
    want = model.forward(prompt)
    monkeypatch.setattr(model, "time_prefill", lambda width: {STORED: 1, "fp32": 3, "bf16": 2}[model.plan.prefill])
    monkeypatch.setattr(calibrate, "measure_pass_costs",  # the copy is never faster
                        lambda backend, max_width, repeats=3: [0.0] + [1.0] * max_width)
    calibrate.measure(model, max_width=4, max_threads=1)
    assert model.plan.prefill == STORED and model.copy_kernel is None
    assert all(layer.w_down.q is None for layer in model.layers) and model.embed.q is not None
    model.truncate(0)
    assert np.array_equal(model.forward(prompt), want)


def test_a_natively_run_model_is_calibrated_in_a_few_passes_without_copies(monkeypatch):
    """The native decoder runs every pass, prefill included: no kernel to choose, no copy to
    make, no warm-up; only pass costs (1, 2, 4 and max_width <= 8 tokens from an empty cache, one pass
    each, after one untimed one-token pass) and the thread count per width, on one thread too
    where passes are short."""
    model = TorchLlama(random_weights(0, vocab=64, hidden=64, layers=2), torch.bfloat16, max_len=256, quant="int8")
    assert model.native is not None
    widths = []
    forward = model.forward
    monkeypatch.setattr(model, "forward", lambda tokens, **kw: widths.append(len(tokens)) or forward(tokens, **kw))
    use = model.use_plan
    monkeypatch.setattr(model, "use_plan",
                        lambda plan, **kw: use(plan, **kw) if plan.copy() is None else pytest.fail(f"{plan} was tried"))
    cal = calibrate.measure(model, max_width=6, max_threads=2)
    # the untimed pass, then 1, 2, 4 and 6 tokens on 2 threads and (short passes) on 1
    assert sorted(widths) == [1, 1, 1, 2, 2, 4, 4, 6, 6]
    assert len(cal.pass_cost) == 7 and all(c > 0 for c in cal.pass_cost[1:])
    assert cal.plan.decode == cal.plan.prefill == STORED and model.copy_kernel is None
    assert model.plan == cal.plan and set(cal.plan.threads) <= {1, 2}
    assert cal.prefill_tokens_per_s == pytest.approx(6 / cal.pass_cost[6])


def test_native_passes_wider_than_16_tokens_are_estimated_not_timed(monkeypatch):
    """A 25-token pass took half a first start's calibration: beyond 16 tokens the cost is
    estimated along the line through the 8- and 16-token passes (wide passes unpack their
    rows once, then cost the same per token: panel_k.c)."""
    model = TorchLlama(random_weights(0, vocab=64, hidden=64, layers=2), torch.bfloat16, max_len=256, quant="int8")
    widths = []
    forward = model.forward
    monkeypatch.setattr(model, "forward", lambda tokens, **kw: widths.append(len(tokens)) or forward(tokens, **kw))
    cal = calibrate.measure(model, max_width=20, max_threads=1)
    assert sorted(widths) == [1, 1, 2, 4, 8, 16]
    per_token = (cal.pass_cost[16] - cal.pass_cost[8]) / 8
    assert cal.pass_cost[20] == pytest.approx(cal.pass_cost[16] + 4 * per_token)
    assert cal.prefill_tokens_per_s == pytest.approx(20 / cal.pass_cost[20])


def test_native_passes_on_amx_tiles_are_timed_once_and_cost_alike_up_to_a_tile(monkeypatch, tmp_path):
    """Where K-quant products run on AMX tiles (amx.c), a tile's time does not depend on how
    many of its 16 tokens are used: a 16-token pass is timed too, and passes from the tiles'
    first width up to it cost as much."""
    model = NativeLlama(map_gguf(gguf_files.write(tmp_path / "k.gguf", types=(Q.Q4_K,))), max_len=256)
    tiles_from = model.native.tiles_from()
    if not tiles_from:
        pytest.skip("no AMX route here")
    widths = []
    forward = model.forward
    monkeypatch.setattr(model, "forward", lambda tokens, **kw: widths.append(len(tokens)) or forward(tokens, **kw))
    cal = calibrate.measure(model, max_width=20, max_threads=1)
    assert sorted(widths) == [1, 1, 2, 4, 8, 16]
    assert cal.pass_cost[tiles_from:17] == [cal.pass_cost[16]] * (17 - tiles_from)
    assert cal.pass_cost[20] == pytest.approx(cal.pass_cost[16] * 20 / 16)


def test_calibration_is_kept_and_a_corrupt_file_is_measured_again(monkeypatch, tmp_path):
    model = int8_model()
    first = calibrate.load_or_measure(model, 4, 1, "key")

    def no_measuring(*_):
        raise AssertionError("measured again")

    monkeypatch.setattr(calibrate, "measure", no_measuring)
    again = calibrate.load_or_measure(model, 4, 1, "key")
    assert again == first and model.plan.prefill == first.plan.prefill
    path = next((tmp_path / "cache" / "calibration").glob("key-*.json"))
    path.write_text("{not json")
    with pytest.raises(AssertionError, match="measured again"):
        calibrate.load_or_measure(model, 4, 1, "key")


@pytest.mark.integration  # the embedded model loaded twice, and decoding until costs are kept
def test_pass_costs_corrected_by_decoding_are_kept_for_the_next_start(monkeypatch):
    """The embedded model on the native backend: its calibration is kept at load; after
    completions, the costs its timed passes corrected replace the kept ones, and the next
    load starts from them, knowing how many passes corrected each width; the prefill rate the
    engine measured replaces calibration's estimate too."""
    from engine.api import Request
    from engine.engine import Engine
    from tests.models import SMALL

    monkeypatch.setattr(Engine, "KEEP_COSTS_EVERY", 20)
    engine = Engine.load(SMALL, threads=2)
    measured = list(engine.calibration.pass_cost)
    prompt = stdlib_text("textwrap.py")[:1500]
    while engine.costs.version < 20:
        engine.complete(prompt, Request(max_new_tokens=16), "lookup")
    kept = list(engine.costs.cost)
    assert kept != measured
    tokens, seconds = engine.target.prefilled
    assert tokens > 0 and engine.target.prefill_rate() == tokens / seconds
    again = Engine.load(SMALL, threads=2)
    assert again.target.prefill_estimate == pytest.approx(tokens / seconds)
    assert again.costs.measured == pytest.approx(again.calibration.pass_cost)
    assert again.calibration.pass_cost != measured and len(again.calibration.pass_cost) == len(measured)
    assert again.costs.timed == pytest.approx(engine.costs.timed) and sum(engine.costs.timed) >= 20


@pytest.mark.integration  # the embedded model loaded twice
def test_a_measured_prefill_rate_is_kept_for_the_first_start():
    """What `lsp_server fetch` runs after loading: a prefill in the server's chunks, whose last
    full chunk's rate replaces calibration's estimate (from a narrow pass) in the kept
    calibration, so the next start sizes its first chunk and cold window from it."""
    from engine.engine import Engine
    from tests.models import SMALL

    engine = Engine.load(SMALL, threads=2)
    estimate = engine.calibration.prefill_tokens_per_s
    engine.measure_prefill()
    rate = engine.target.last_chunk_rate
    assert rate is not None and rate != estimate and engine.target.length == 0
    again = Engine.load(SMALL, threads=2)
    assert again.target.prefill_estimate == pytest.approx(rate)
    assert again.target.prefill_chunk == engine.target.prefill_chunk


def test_converted_weights_round_trip_and_key_on_content(tmp_path):
    model_file = tmp_path / "model.gguf"
    model_file.write_bytes(bytes(range(256)) * 4096)
    weights = random_weights(1, vocab=64, hidden=64, layers=1)
    converted = weight_cache.convert(dataclasses.replace(weights, tensors=dict(weights.tensors)),
                                     torch.bfloat16, "int8")
    weight_cache.save(converted, model_file, "int8")
    loaded = weight_cache.load(model_file, "int8")
    assert loaded.config == weights.config
    for name, w in converted.tensors.items():
        got = loaded.tensors[name]
        if isinstance(w, Int8Weight):
            assert torch.equal(got.q, w.q) and torch.equal(got.scale, w.scale)
        else:
            assert torch.equal(got, w)
    # One changed byte in the middle of the file is another model.
    key = content_key(model_file)
    data = bytearray(model_file.read_bytes())
    data[len(data) // 2] ^= 1
    model_file.write_bytes(bytes(data))
    assert content_key(model_file) != key and weight_cache.load(model_file, "int8") is None


def test_a_corrupt_weight_cache_is_ignored(tmp_path):
    model_file = tmp_path / "model.gguf"
    model_file.write_bytes(b"x" * 1000)
    weight_cache._path(model_file, "int8").write_bytes(b"garbage")
    assert weight_cache.load(model_file, "int8") is None


def test_two_processes_writing_one_entry_leave_a_whole_file(tmp_path):
    target = tmp_path / "entry.bin"
    writer = ("import sys; from pathlib import Path; from engine.loading.user_cache import write_atomically;"
              "byte = sys.argv[1].encode();"
              "write_atomically(Path(sys.argv[2]), lambda p: p.write_bytes(byte * (64 << 20)))")
    procs = [subprocess.Popen([sys.executable, "-c", writer, b, str(target)]) for b in "ab"]
    assert [p.wait() for p in procs] == [0, 0]
    data = target.read_bytes()
    assert len(data) == 64 << 20 and data in (b"a" * len(data), b"b" * len(data))
    assert [p.name for p in tmp_path.iterdir()] == ["entry.bin"]  # no temporary file left


def test_write_atomically_leaves_the_old_entry_when_writing_fails(tmp_path):
    target = tmp_path / "entry.json"
    target.write_text("old")

    def failing(path):
        path.write_text("half")
        raise OSError("disk full")

    with pytest.raises(OSError):
        write_atomically(target, failing)
    assert target.read_text() == "old" and len(list(tmp_path.iterdir())) == 1


def test_a_cancelled_prefill_leaves_a_prefix_of_the_prompt(fp32_engine):
    engine = fp32_engine
    tokens = engine.tokenizer.encode(stdlib_text("textwrap.py"))[:700]
    cancel = threading.Event()
    chunks = []
    forward = engine.target.forward

    def counting(*args, **kwargs):
        chunks.append(1)
        cancel.set()  # cancelled while the first chunk runs
        return forward(*args, **kwargs)

    engine.forget_cache()
    engine.target.forward = counting
    try:
        engine.prefill(tokens, cancel)
    finally:
        del engine.target.forward
    assert len(chunks) == 1 and 0 < engine.target.length < len(tokens) - 1
    assert engine.target.tokens == tokens[:engine.target.length]


@pytest.mark.integration  # the embedded model, timed
def test_a_cold_spot_gets_a_window_the_machine_prefills_in_about_a_second(fp32_engine, monkeypatch):
    engine = fp32_engine
    rate = 150.0  # tokens per second: a slow machine
    monkeypatch.setattr(engine, "calibration", dataclasses.replace(
        engine.calibration, prefill_tokens_per_s=rate))
    monkeypatch.setattr(engine.target, "prefilled", (0, 0.0))  # no rate measured yet: calibration's
    text = stdlib_text("textwrap.py")
    cut = text.index("def dedent(")
    cursor = Cursor(text[:cut] + "def dedent(", text[cut + len("def dedent("):])
    engine.forget_cache()
    suggester = Suggester(engine, Documents())
    prompt, full = suggester.prompt_for(cursor, [])
    assert full is not None and len(engine.prompt_tokens(full)) > 4 * rate
    assert len(engine.prompt_tokens(prompt)) <= rate * COLD_PREFILL_S
    assert engine.prefill_seconds(prompt) <= COLD_PREFILL_S
    assert engine.prompt_tokens(prompt)[-5:] == engine.prompt_tokens(full)[-5:]  # same cursor
    # Widened (the answer that follows a cold one): a window chosen afresh for three times as long
    wider = Settings(coldPrefillMs=3000 * COLD_PREFILL_S)
    wide = engine.prompt_tokens(suggester.prompt_for(cursor, [], settings=wider, widen=True)[0])
    assert len(engine.prompt_tokens(prompt)) < len(wide) <= 3 * rate * COLD_PREFILL_S
    assert wide[-5:] == engine.prompt_tokens(full)[-5:]
    # coldPrefillMs 0: the full window at once, however long it takes (as llama.vim waits)
    assert suggester.prompt_for(cursor, [], settings=Settings(coldPrefillMs=0)) == (full, None)
    # windowTokens: a shorter window, or a longer one, never past what the model's context leaves
    window = lambda tokens: len(engine.prompt_tokens(suggester.prompt_for(  # noqa: E731
        cursor, [], settings=Settings(coldPrefillMs=0, windowTokens=tokens))[0]))
    assert window(256) < len(engine.prompt_tokens(full)) < window(2048)
    assert window(16384) <= engine.max_len - Settings().maxTokens - engine.max_nodes - 2  # nothing trimmed
    # windowTokens null (the default): sized to the machine once, the default on a slow one
    assert suggester.prompt_for(cursor, [], settings=Settings(coldPrefillMs=0, windowTokens=1024))[0] == full
    # Once the full window is cached (the background extension), it is used.
    engine.prefill(engine.prompt_tokens(full))
    assert suggester.prompt_for(cursor, []) == (full, None)


def test_the_default_window_is_what_the_machine_prefills_in_a_few_seconds():
    assert auto_window(70.0) == auto_window(250.0) == Budget.prefix_tokens  # 2-core CPUs
    assert Budget.prefix_tokens < auto_window(500.0) < MAX_AUTO_WINDOW
    assert auto_window(500.0) < auto_window(600.0)
    assert auto_window(20_000.0) == auto_window(float("inf")) == MAX_AUTO_WINDOW  # a GPU; unknown (remote)


@pytest.mark.integration  # the embedded model
def test_a_fast_machine_gets_the_larger_window_and_keeps_it(fp32_engine, monkeypatch):
    engine = fp32_engine
    monkeypatch.setattr(engine, "calibration", dataclasses.replace(engine.calibration, prefill_tokens_per_s=1e5))
    monkeypatch.setattr(engine.target, "prefilled", (0, 0.0))  # no rate measured yet: calibration's
    text = stdlib_text("argparse.py")
    cut = text.index("def _get_values(")
    cursor = Cursor(text[:cut] + "def _get_values(", text[cut + len("def _get_values("):])
    suggester = Suggester(engine, Documents())
    tokens = lambda settings: len(engine.prompt_tokens(suggester.prompt_for(cursor, [], settings=settings)[0]))  # noqa: E731
    auto = tokens(Settings())
    assert tokens(Settings(windowTokens=Budget.prefix_tokens)) < auto
    # a rate measured later (slower) does not move the window, which would empty the cache
    monkeypatch.setattr(engine.calibration, "prefill_tokens_per_s", 50.0)
    assert tokens(Settings(coldPrefillMs=0)) == auto


def test_a_window_prefilled_where_the_cursor_rests_serves_the_first_request_below_it(fp32_engine, monkeypatch):
    """draftline/cursor: the full window at the end of the line where the cursor rests is
    prefilled ahead (Suggester.prefill), so the first request on a new line below it gets the
    full window, where a cold cache gets a shortened one."""
    engine = fp32_engine
    monkeypatch.setattr(engine, "calibration", dataclasses.replace(engine.calibration, prefill_tokens_per_s=150.0))
    monkeypatch.setattr(engine.target, "prefilled", (0, 0.0))  # no rate measured yet: calibration's
    text = stdlib_text("textwrap.py")
    written = text[:text.index("\ndef dedent(")]  # a file being written, its cursor on the last line
    settings = Settings()
    suggester = Suggester(engine, Documents())
    below = Cursor(written + "\ndef dedent(", "")
    engine.forget_cache()
    assert suggester.prompt_for(below, [])[1] is not None  # cold: a shortened window
    lines = written.split("\n")
    rests = plan_at("file:///textwrap.py", written, len(lines) - 1, len(lines[-1]), settings)
    assert suggester.prefill(rests, settings, threading.Event())
    prompt, full = suggester.prompt_for(below, [])
    assert full is None and engine.prefill_seconds(prompt) <= COLD_PREFILL_S
    engine.forget_cache()
    cancelled = threading.Event()
    cancelled.set()  # a request came first: nothing is prefilled
    assert not suggester.prefill(rests, settings, cancelled) and engine.cached_tokens(prompt) == 0


@pytest.mark.integration  # the embedded model, in the native backend's caches
def test_a_file_typed_in_at_once_grows_the_window_prefilled_where_it_opened(monkeypatch):
    """A file opened (draftline/cursor at once) and typed in within a second: the prefill there
    begins with the window a request would get now, and the full window follows in another
    cache; a request on the next line, cutting the prefill short, grows that window from its
    cached start."""
    from engine.engine import Engine
    from tests.models import SMALL

    engine = Engine.load(SMALL, dtype="gguf", threads=2)
    assert engine.completion_caches > 1
    monkeypatch.setattr(engine, "prefill_tokens_per_s", lambda: 150.0)  # a slow machine
    text = stdlib_text("textwrap.py")
    written = text[:text.index("\ndef dedent(")]
    lines, settings = written.split("\n"), Settings()
    opened = plan_at("file:///textwrap.py", written, len(lines) - 1, len(lines[-1]), settings)
    suggester, typed, prefill = Suggester(engine, Documents()), threading.Event(), engine.prefill
    prefilled: list[list[int]] = []

    def then_typed(tokens: list[int], cancel: threading.Event) -> None:  # a request came after the first
        prefill(tokens, cancel)
        prefilled.append(tokens)
        typed.set()

    monkeypatch.setattr(engine, "prefill", then_typed)
    assert not suggester.prefill(opened, settings, typed)
    window, full = prefilled
    assert len(window) <= 150 * COLD_PREFILL_S < len(full) and engine.cached_tokens(full) <= 1
    grown, full_below = suggester.prompt_for(Cursor(written + "\ndef dedent(", ""), [], opened.path)
    assert full_below is not None and len(engine.prompt_tokens(grown)) > len(window)
    assert engine.cached_tokens(grown) >= len(window) - 2  # all but the edge
    assert engine.prefill_seconds(grown) < COLD_PREFILL_S / 4


def test_the_next_line_grows_the_cold_window_instead_of_choosing_one_again(fp32_engine, monkeypatch):
    """Written line by line with a pause on each new line: the cold window of the first pause
    grows down to the next one, so its start stays cached and only the new line is prefilled;
    a spot above it gets a window chosen afresh."""
    engine = fp32_engine
    monkeypatch.setattr(engine, "calibration", dataclasses.replace(engine.calibration, prefill_tokens_per_s=150.0))
    monkeypatch.setattr(engine.target, "prefilled", (0, 0.0))  # no rate measured yet: calibration's
    text = stdlib_text("textwrap.py")
    at = text.index("\n        lines = []\n")  # inside TextWrapper._wrap_chunks
    written, line = text[:at + 1], "        lines = []\n"
    suggester = Suggester(engine, Documents())
    engine.forget_cache()
    first, full = suggester.prompt_for(Cursor(written + "        ", ""), [])
    assert full is not None
    engine.prefill(engine.prompt_tokens(first))  # what the first pause's request prefills
    below = Cursor(written + line + "        ", "")
    grown, full_below = suggester.prompt_for(below, [])
    assert full_below is not None and grown != full_below
    assert grown.startswith(first.rstrip(" ")) and grown.endswith(line + "        ")
    assert engine.cached_tokens(grown) >= len(engine.prompt_tokens(first)) - 2  # all but the edge
    assert engine.prefill_seconds(grown) < COLD_PREFILL_S / 4
    # a spot above the first one: not a continuation, chosen afresh within the budget
    above = Cursor(text[:text.index("\nclass TextWrapper:") + 1], "")
    fresh, _ = suggester.prompt_for(above, [])
    assert not fresh.startswith(first.rstrip(" ")) and engine.prefill_seconds(fresh) <= COLD_PREFILL_S


def _after_a_cold_answer(engine, monkeypatch) -> tuple[Suggester, str, str, str]:
    """A slow machine (150 tokens/s) and textwrap.py written up to a line inside
    TextWrapper._wrap_chunks: the suggester, that text, the line that comes next, and the cold
    window a request at the line's indentation got and prefilled."""
    monkeypatch.setattr(engine, "calibration", dataclasses.replace(engine.calibration, prefill_tokens_per_s=150.0))
    monkeypatch.setattr(engine.target, "prefilled", (0, 0.0))  # no rate measured yet: calibration's
    text = stdlib_text("textwrap.py")
    at = text.index("\n        lines = []\n")
    written = text[:at + 1]
    suggester = Suggester(engine, Documents())
    engine.forget_cache()
    first, _ = suggester.prompt_for(Cursor(written + "        ", ""), [])
    engine.prefill(engine.prompt_tokens(first))
    return suggester, written, "        lines = []\n", first


def test_a_wider_window_cut_short_leaves_the_requests_window_to_grow(fp32_engine, monkeypatch):
    """After a cold answer a wider window is chosen afresh in idle time; an edit that stops it
    before its prefill leaves it uncached, and the next line's request grows the window the
    request before it prefilled (cached) rather than choosing one again from scratch."""
    engine = fp32_engine
    suggester, written, line, first = _after_a_cold_answer(engine, monkeypatch)
    wider = Settings(coldPrefillMs=2 * Settings.coldPrefillMs)  # still short of the full window here
    wide, full = suggester.prompt_for(Cursor(written + "        ", ""), [], settings=wider, widen=True)
    assert full is not None and not wide.startswith(first.rstrip(" "))  # chosen afresh, not prefilled
    grown, _ = suggester.prompt_for(Cursor(written + line + "        ", ""), [])
    assert grown.startswith(first.rstrip(" ")) and grown.endswith(line + "        ")
    assert engine.prefill_seconds(grown) < COLD_PREFILL_S / 4


def test_the_wider_windows_start_is_prefilled_for_the_next_line_to_grow(fp32_engine, monkeypatch):
    """After a cold answer, idle time prefills the wider window up to the cursor's line (what the
    user typing on leaves as it is); the next line's request grows that window from its cached
    start, with more lines above than the request's window before it had."""
    engine = fp32_engine
    suggester, written, line, first = _after_a_cold_answer(engine, monkeypatch)
    wider = Settings(coldPrefillMs=2 * Settings.coldPrefillMs)  # still short of the full window here
    suggester.prefill_settled(Plan("file:///t.py", Cursor(written + "        ", ""), False, ""), wider, threading.Event())
    grown, _ = suggester.prompt_for(Cursor(written + line + "        ", ""), [])
    assert grown.endswith(line + "        ") and not grown.startswith(first.rstrip(" "))
    assert len(engine.prompt_tokens(grown)) > len(engine.prompt_tokens(first)) * 3 / 2
    assert engine.prefill_seconds(grown) < COLD_PREFILL_S / 4


def test_the_wider_answer_is_written_from_the_window_its_start_was_prefilled_for(fp32_engine, monkeypatch):
    """The wider stage prefills its window's start, then writes the answer: asked again at the
    same spot, the window is the one prefilled, though that prefill moved the measured rate
    that sized it (a window sized again would share a few tokens and prefill the rest anew)."""
    engine = fp32_engine
    suggester, written, _, _ = _after_a_cold_answer(engine, monkeypatch)
    wider, cursor = Settings(coldPrefillMs=2 * Settings.coldPrefillMs), Cursor(written + "        ", "")
    suggester.prefill_settled(Plan("file:///t.py", cursor, False, ""), wider, threading.Event())
    prefilled = engine.prompt_tokens(suggester.prompt_for(cursor, [], "", wider, widen=True)[0])
    monkeypatch.setattr(engine.target, "prefilled", (10_000, 10_000 / 400.0))  # measured: faster
    again, full = suggester.prompt_for(cursor, [], "", wider, widen=True)
    assert full is not None and engine.prompt_tokens(again) == prefilled
    assert engine.cached_tokens(again) >= len(prefilled) - 8  # the cursor's line and the suffix
    moved = Cursor(written + "        lines", "")  # another spot: chosen for it
    assert suggester.prompt_for(moved, [], "", wider, widen=True)[0] != again


def test_an_unusable_cache_directory_costs_time_not_the_model(tmp_path, monkeypatch):
    """A read-only or broken cache location: nothing is kept, everything still loads."""
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the cache directory should be")
    monkeypatch.setenv("DRAFTLINE_CACHE_DIR", str(blocker))
    model_file = tmp_path / "model.gguf"
    model_file.write_bytes(b"x" * 1000)
    weights = random_weights(2, vocab=64, hidden=64, layers=1)
    weight_cache.save(weights, model_file, "fp32")  # logs a warning, raises nothing
    assert weight_cache.load(model_file, "fp32") is None
    cal = calibrate.load_or_measure(int8_model(), 4, 1, "key")
    assert len(cal.pass_cost) == 5


def test_a_prefill_is_cancelled_within_about_half_a_second_at_the_estimated_rate(fp32_engine):
    """A background prefill of a large model on a small CPU (40 tokens/s) runs in 16-token
    chunks, not 256 (6 s), so a new request waits for at most one short chunk; chunks are whole
    16-token groups (AMX tiles), sized by the measured rate once there is one."""
    from engine.execution.backends.base import PREFILL_CHUNK, prefill_chunk_for

    assert prefill_chunk_for(40.0) == 16 and prefill_chunk_for(5.0) == 16 and prefill_chunk_for(110.0) == 48
    assert prefill_chunk_for(1e6) == PREFILL_CHUNK
    assert fp32_engine.target.prefill_estimate == fp32_engine.calibration.prefill_tokens_per_s  # until measured


def test_a_kept_calibration_belongs_to_the_c_decoder_build_that_measured_it(tmp_path):
    """A new kernel changes what passes cost, so a calibration measured with another build of
    the native decoder is not reused (nor one measured without it)."""
    from engine.engine import _calibration_key

    model_file = tmp_path / "model.gguf"
    model_file.write_bytes(b"weights")
    model = TorchLlama(random_weights(0, vocab=64, hidden=64, layers=2), torch.bfloat16, max_len=256, quant="int8")
    assert model.native is not None
    key = _calibration_key(str(model_file), model, 2)
    assert model.native.build in key and _calibration_key(str(model_file), model, 2) == key
    model.native.build = "decoder-another-build"
    assert _calibration_key(str(model_file), model, 2) != key
    model.native = None
    assert _calibration_key(str(model_file), model, 2) != key


def test_the_prefill_rate_is_learned_from_real_prefills():
    """Calibration only estimates the prefill rate (from narrow passes); once the engine has
    prefilled a few chunks, their measured rate is what prompt trimming uses."""
    model = int8_model()
    model.set_prefill_estimate(32.0)  # 16-token chunks to start
    assert model.prefill_rate() is None and model.prefill_chunk == 16
    cancel = threading.Event()  # chunks are short where a request may cancel
    model.sync([(7 * i) % 64 for i in range(40)], cancel)  # 16 tokens, then the rest (24) in one chunk
    assert model.prefilled[0] == 40 and model.prefill_rate() is None
    model.sync([(7 * i) % 64 for i in range(40)] + [(3 * i) % 64 for i in range(40)], cancel)
    tokens, seconds = model.prefilled
    assert tokens == 80 and model.prefill_rate() == pytest.approx(80 / seconds)


def test_prefill_chunks_grow_to_about_half_a_second_and_no_further(monkeypatch):
    """A wide pass prefills faster than a narrow one (its fixed costs are shared), so chunks
    are sized by the last chunk's rate: from calibration's low estimate they grow to about
    CANCEL_WAIT_S, in whole 16-token groups, and a chunk never takes longer than that."""
    from engine.execution.backends import base

    model = int8_model()
    model.set_prefill_estimate(40.0)
    clock, passes = [0.0], []

    def forward(tokens, parents=None, logits=True):  # 0.1 s a pass, 5 ms a token
        passes.append((len(tokens), 0.1 + 0.005 * len(tokens)))
        clock[0] += passes[-1][1]
        model.tokens.extend(tokens)

    monkeypatch.setattr(model, "forward", forward)
    monkeypatch.setattr(base.time, "perf_counter", lambda: clock[0])
    model.sync(list(range(400)) * 2, threading.Event())  # a prefill a request may cancel
    assert [n for n, _ in passes][:5] == [16, 32, 48, 64, 64]
    assert all(seconds <= base.CANCEL_WAIT_S for _, seconds in passes)
    passes.clear()
    model.truncate(0)
    model.sync(list(range(600)))  # nothing can cancel it: nothing waits on a chunk
    assert [n for n, _ in passes] == [base.PREFILL_CHUNK, base.PREFILL_CHUNK, 600 - 2 * base.PREFILL_CHUNK]
