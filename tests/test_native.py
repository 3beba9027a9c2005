"""The native decoder (engine/execution/native/): passes computed in C on matrices in their stored formats.

Checked against independent routes: gguf-py's dequantizers for each GGUF format (one product
at a time, with the error bound of the activations' quantization), and the same weights
dequantized into an fp32 model run by the torch code (whole passes). And for exactness by
construction: a token's logits must be bit for bit the same whatever the pass width, the
thread count or the shape of the token tree. Both builds of the products are tested here: the
one for this CPU and the AVX2-only one."""
from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import mmap
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q
from gguf.quants import dequantize

from engine.execution import native
from engine.execution.native.repack import PACKED, Repacked
from engine.loading import weight_cache
from engine.execution.backends.native_llama import NativeLlama
from engine.execution.backends.torch_llama import TorchLlama
from engine.loading.formats.gguf_blocks import BlockMatrix
from engine.loading.formats.gguf_mapped import map_gguf
from engine.execution.kernels import QUANTIZED
from engine.loading.fetch import model_path
from engine.models import load_model
from engine.execution.native import NativeDecoder
from engine.tokenization import load_tokenizer
from engine.loading.formats.load import load_weights
from engine.loading.weights import LoadedWeights
from tests import gguf_files
from tests.code_samples import stdlib_text
from tests.models import SMALL
from tests.tiny_models import random_weights

if native.load_library() is None:
    pytest.skip("no native decoder on this machine (needs a C compiler and AVX2/FMA)", allow_module_level=True)

PREFIX = 160  # prompt positions in the cache before the decoded ones
STEPS = 13  # tokens decoded after it
WIDE = 40  # a pass wider than the decoding tiles
SLABS = 70  # a pass wider than the panel route's slab of 64 tokens (panel_k.c)
AVX2 = ["-mavx2", "-mfma", "-mf16c"]


@pytest.fixture(scope="module")
def avx2_library(tmp_path_factory):
    """The products machines without AVX-512 VNNI get (AVX2: maddubs and madd), built here."""
    return native.build(tmp_path_factory.mktemp("avx2") / "avx2.so", AVX2)


# The AVX2 build is compiled for the test (seconds): the integration tier.
@pytest.fixture(scope="module", params=["native", pytest.param("avx2", marks=pytest.mark.integration)])
def library(request):
    if request.param == "native":
        return native.load_library()
    return request.getfixturevalue("avx2_library")


@contextlib.contextmanager
def _amx(lib, on: bool):
    """The AMX route on or off for what runs inside (skips where it cannot run: no AMX in this
    CPU or build, or the kernel refused the tile state)."""
    was = lib.draftline_amx(-1)
    if lib.draftline_amx(int(on)) != on:
        lib.draftline_amx(was)
        pytest.skip("no AMX route here")
    try:
        yield
    finally:
        lib.draftline_amx(was)


# --- one matrix of each format ----------------------------------------------------------------

def _blocks(qtype: Q, rows: int, cols: int, seed: int) -> BlockMatrix:
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((rows, cols)).astype(np.float32)
    return BlockMatrix(int(qtype), gguf_files.encode(w, qtype, rng), cols)


def _reference(m: BlockMatrix) -> torch.Tensor:
    """gguf-py's dequantization of the blocks, float32 [rows, cols]."""
    data = m.data if m.ggml_type not in (Q.F32, Q.F16) else m.data.view(np.float32 if m.ggml_type == Q.F32 else np.float16)
    return torch.from_numpy(dequantize(data, Q(m.ggml_type)).astype(np.float32)).reshape(m.shape)


@pytest.mark.parametrize("qtype", gguf_files.TYPES, ids=lambda t: t.name)
def test_each_format_multiplies_as_its_dequantized_weights(library, qtype):
    """The weights the products see are gguf-py's, exactly; each product is within the bound
    its activations' quantization allows: values that share a scale max|x| / 127 are rounded
    to it, so each is off by at most that max / 254, and a row's product by at most
    sum(|w| * that max) / 254. Formats of 32-column blocks: in each 128 columns, the 16 values
    of one lane (4 columns in each 32) share a scale; K-quants: all 128 do. Float formats are
    multiplied in float32, unquantized."""
    m = _blocks(qtype, rows=12, cols=512, seed=int(qtype))
    want = _reference(m)
    assert torch.equal(torch.from_numpy(native.rows(library, m, list(range(12)))), want)
    x = torch.randn(5, 512) * torch.linspace(0.1, 3, 512)  # uneven magnitudes, as activations have
    got = torch.from_numpy(native.product(library, m, x))
    exact = (x.double() @ want.double().T)
    if qtype in (Q.F32, Q.F16, Q.BF16):
        bound = 1e-5 * (x.abs().double() @ want.abs().double().T) + 1e-6
    else:
        if qtype in (Q.Q4_K, Q.Q5_K, Q.Q6_K):
            per_scale = x.abs().reshape(5, -1, 1, 1, 128)  # [token, 128-column block, ...]
            shared = per_scale.amax(4, keepdim=True).expand_as(per_scale).reshape(5, -1).double()
        else:
            per_lane = x.abs().reshape(5, -1, 4, 8, 4)  # [token, 128-column block, unit, lane, column]
            shared = per_lane.amax((2, 4), keepdim=True).expand_as(per_lane).reshape(5, -1).double()
        bound = 1.001 * (shared @ want.abs().double().T) / 254 + 1e-5 * exact.abs() + 1e-6
    assert ((got.double() - exact).abs() <= bound).all()


@pytest.mark.parametrize("amx", [False, True], ids=["registers", "amx"])
@pytest.mark.parametrize("qtype", gguf_files.TYPES, ids=lambda t: t.name)
def test_a_formats_product_for_a_token_is_the_same_in_every_pass_width(library, qtype, amx):
    """Passes of 1 to 8 tokens multiply as they read the weights, wider ones from an unpacked
    block, K-quants in panels (four rows from 2 tokens in the AVX2 build; sixteen rows from 9
    tokens with AVX-512 VNNI) or, where the CPU and kernel allow, in AMX tiles; 37 rows leave
    some outside the tiles and panels. Every route gives a token the same bits."""
    m = _blocks(qtype, rows=37, cols=512, seed=1)
    x = torch.randn(SLABS, 512)
    with _amx(library, False):
        one_by_one = np.concatenate([native.product(library, m, x[i:i + 1]) for i in range(SLABS)])
    with _amx(library, amx):
        for width in list(range(2, STEPS + 1)) + [17, WIDE, SLABS]:
            assert np.array_equal(native.product(library, m, x[:width]), one_by_one[:width]), width


@pytest.mark.integration  # llama-cpp-python, built by `make test`
def test_the_amx_route_leaves_another_librarys_tiles_as_it_found_them(tmp_path):
    """The tile configuration is per thread, and llama.cpp's AMX code (where its build has it,
    as bench's peer does here) sets it once per thread and counts on it: our route must put it
    back, or llama.cpp dies with SIGILL after one of our wide passes."""
    llama_cpp = pytest.importorskip("llama_cpp")
    lib = native.load_library()
    ours = NativeLlama(map_gguf(gguf_files.write(tmp_path / "mixed.gguf", "qwen2")), max_len=512)
    tokens = np.random.default_rng(0).integers(0, gguf_files.VOCAB, WIDE).tolist()
    ours.set_threads(1)  # both on this thread
    with _amx(lib, True):
        llm = llama_cpp.Llama(str(model_path(SMALL)), n_ctx=512, n_threads=1, verbose=False)
        prompt = _embedded_tokens()[:24]
        llm.eval(prompt)
        want = np.array(llm.scores[len(prompt) - 1])
        for _ in range(2):
            ours.truncate(0)
            ours.forward(tokens)  # wide passes of K-quants: AMX tiles
            llm.reset()
            llm.eval(prompt)
            assert np.array_equal(np.array(llm.scores[len(prompt) - 1]), want)


# --- whole models -----------------------------------------------------------------------------

@dataclasses.dataclass
class Case:
    model: TorchLlama | NativeLlama
    reference: LoadedWeights  # the same weights as floats, in Hugging Face's rotary layout
    tokens: list[int]


def _embedded_tokens() -> list[int]:
    return load_tokenizer(model_path(SMALL)).encode(stdlib_text("textwrap.py"))[:PREFIX + WIDE]


# The embedded model in each dtype takes seconds per test: the integration tier; the tiny models stay.
EMBEDDED_DTYPES = [pytest.param(d, marks=pytest.mark.integration) for d in ("int4", "int8", "gguf")]


@pytest.fixture(scope="module", params=[*EMBEDDED_DTYPES, "mixed-llama", "mixed-qwen2"])
def case(request, tmp_path_factory) -> Case:
    """The embedded model in the torch backend's int4/int8 layouts and mapped in its own Q4_1
    blocks (the native backend); tiny models whose matrices take every format in turn, llama (Q/K rows as llama.cpp
    permutes them: pairwise rotary) and qwen2 (Q/K/V biases)."""
    if request.param.startswith("mixed"):
        path = gguf_files.write(tmp_path_factory.mktemp("gguf") / "mixed.gguf", request.param.split("-")[1])
        model = NativeLlama(map_gguf(path), max_len=512)
        rng = np.random.default_rng(0)
        return Case(model, load_weights(path), rng.integers(0, gguf_files.VOCAB, PREFIX + WIDE).tolist())
    model, _ = load_model(SMALL, request.param)
    if request.param == "gguf":
        return Case(model, load_weights(model_path(SMALL)), _embedded_tokens())
    converted = weight_cache.load(model_path(SMALL), request.param)
    tensors = {name: (w.dequantize(torch.float32) if isinstance(w, QUANTIZED) else w.float())
               for name, w in converted.tensors.items()}
    return Case(model, dataclasses.replace(converted, tensors=tensors), _embedded_tokens())


def _fp32_twin(case: Case) -> TorchLlama:
    """The same model computed by the torch code in float32: what the native decoder approximates."""
    twin = TorchLlama(case.reference, torch.float32, max_len=case.model.max_len)
    twin.limit_vocab(case.model.vocab_size)
    return twin


def _decode(model, tokens: list[int], widths: list[int], threads: int = 2) -> np.ndarray:
    """Logits of tokens[PREFIX:] decoded in passes of the given widths, after a prefill."""
    model.set_threads(threads)
    model.truncate(0)
    model.forward(tokens[:PREFIX], logits=False)
    out, at = [], PREFIX
    for width in widths:
        out.append(model.forward(tokens[at:at + width]))
        at += width
    return np.concatenate(out)


def _array(t) -> np.ndarray:
    """A copy as float32 numpy (the torch backend records bf16 tensors)."""
    return np.array(t, dtype=np.float32) if isinstance(t, np.ndarray) else t.float().numpy().copy()


def test_the_models_decode_natively(case):
    assert case.model.native is not None


def test_a_token_is_computed_alike_whatever_the_pass_width_and_threads(case):
    one_by_one = _decode(case.model, case.tokens, [1] * STEPS)
    for widths, threads in [([STEPS], 2), ([4, 9], 2), ([2, 3, 8], 1), ([STEPS], 1), ([1] * STEPS, 1),
                            ([5, 6, 2], 2)]:
        assert np.array_equal(_decode(case.model, case.tokens, widths, threads), one_by_one), (widths, threads)


@pytest.mark.parametrize("amx", [False, True], ids=["registers", "amx"])
def test_a_prompt_wide_pass_computes_each_token_as_decoding_does(case, amx):
    """Passes wider than the decoding tiles (prefill) take the block route through the
    products, in registers or in AMX tiles; the results must not change."""
    one_by_one = _decode(case.model, case.tokens, [1] * WIDE)
    with _amx(case.model.native.lib, amx):
        assert np.array_equal(_decode(case.model, case.tokens, [WIDE]), one_by_one)


def test_a_token_tree_computes_each_branch_as_a_chain(case):
    """Tree: 0 -> 1 -> 3 and 0 -> 2 -> 4; each node's logits equal those of its path decoded
    one token at a time (the positions in between hold other branches)."""
    model = case.model
    a, b, c, d, e = case.tokens[PREFIX:PREFIX + 5]
    model.truncate(0)
    model.forward(case.tokens[:PREFIX], logits=False)
    tree = model.forward([a, b, c, d, e], parents=[-1, 0, 0, 1, 2])
    for path, nodes in [([a, b, d], [0, 1, 3]), ([a, c, e], [0, 2, 4])]:
        model.truncate(PREFIX)
        chain = np.concatenate([model.forward([token]) for token in path])
        assert np.array_equal(tree[nodes], chain)


def test_a_prefill_without_outputs_leaves_the_cache_a_full_pass_leaves(case):
    """A pass with no logits and no recorded features skips the last layer past its keys and
    values; the next tokens must see the same cache as after a pass that computed it all."""
    model = case.model
    model.truncate(0)
    model.forward(case.tokens[:PREFIX])
    want = model.forward(case.tokens[PREFIX:PREFIX + 4])
    model.truncate(0)
    model.forward(case.tokens[PREFIX - 1::-1])  # other keys and values where the prefix goes
    model.truncate(0)
    model.forward(case.tokens[:PREFIX], logits=False)
    assert np.array_equal(model.forward(case.tokens[PREFIX:PREFIX + 4]), want)


def test_a_prefill_records_the_same_features_as_decoding(case):
    """A feature-conditioned draft reads the final normed states of the target's prefill:
    they must be what a decoding pass of the same tokens records (normed once)."""
    model = case.model
    model.record_features()
    model.truncate(0)
    model.forward(case.tokens[:PREFIX], logits=False)
    prefilled = _array(model.features[:PREFIX])
    model.truncate(0)
    model.forward(case.tokens[:PREFIX])
    assert np.array_equal(_array(model.features[:PREFIX]), prefilled)


def test_logits_are_close_to_the_fp32_model_on_the_same_weights(case):
    """Activations quantized to int8 (a scale per 16 values, per 128 for the K-quants) and a bf16
    KV cache: within 3% of the logits' range of the fp32 model on the same (dequantized)
    weights, the same next token nearly everywhere."""
    want = _decode(_fp32_twin(case), case.tokens, [STEPS])
    got = _decode(case.model, case.tokens, [1] * STEPS)
    assert np.abs(got - want).max() <= 0.03 * np.abs(want).max()
    assert (got.argmax(-1) == want.argmax(-1)).mean() >= 12 / 13


@pytest.mark.integration  # the embedded model in three dtypes
def test_logits_are_nearly_as_close_to_the_dequantized_model_as_the_torch_kernels():
    """Where the torch kernels can run the same model (int4/int8 layouts), the native decoder
    is within 2.5x of their distance from the fp32 model: they round every activation to bf16
    (8 significant bits), it rounds them to int8 with a scale per 16 values (measured here
    about 2x: SmolLM2's activations have outliers)."""
    for dtype in ("int4", "int8"):
        model, _ = load_model(SMALL, dtype)
        converted = weight_cache.load(model_path(SMALL), dtype)
        tensors = {name: (w.dequantize(torch.float32) if isinstance(w, QUANTIZED) else w.float())
                   for name, w in converted.tensors.items()}
        tokens = _embedded_tokens()
        want = _decode(_fp32_twin(Case(model, dataclasses.replace(converted, tensors=tensors), tokens)),
                       tokens, [STEPS])
        got = _decode(model, tokens, [1] * STEPS)
        decoder, model.native = model.native, None
        try:
            torch_kernels = _decode(model, tokens, [1] * STEPS)
        finally:
            model.native = decoder
        assert np.abs(got - want).max() <= 2.5 * np.abs(torch_kernels - want).max(), dtype


@pytest.mark.integration  # compiles the AVX2 build
def test_the_avx2_build_computes_the_same_model(case, avx2_library):
    model = case.model
    decoder = model.native
    try:
        model.native = NativeDecoder(avx2_library, model)
        one_by_one = _decode(model, case.tokens, [1] * STEPS)
        assert np.array_equal(_decode(model, case.tokens, [5, 8]), one_by_one)
        assert np.array_equal(_decode(model, case.tokens, [3, 1, 9], threads=1), one_by_one)
        want = _decode(_fp32_twin(case), case.tokens, [STEPS])
        assert (one_by_one.argmax(-1) == want.argmax(-1)).mean() >= 12 / 13
    finally:
        model.native = decoder


def test_pairwise_rotary_on_the_files_rows_is_the_models_rotary(tmp_path):
    """A llama GGUF keeps Q/K rows in llama.cpp's interleaved order; turning adjacent pairs
    there is the Hugging Face rotation of the un-permuted rows. With float32 matrices (products
    unquantized) the mapped file gives the fp32 model's logits to the bf16 KV cache's rounding,
    and rotating halves instead would not."""
    path = gguf_files.write(tmp_path / "f32.gguf", "llama", types=(Q.F32,))
    model = NativeLlama(map_gguf(path), max_len=256)
    twin = TorchLlama(load_weights(path), torch.float32, max_len=256)
    ids = list(range(3, 70))
    want = twin.forward(ids)
    assert model.rotary_pairs
    assert np.abs(model.forward(ids) - want).max() <= 0.01 * np.abs(want).max()
    model.rotary_pairs = False
    model.native = NativeDecoder(native.load_library(), model)
    model.truncate(0)
    assert np.abs(model.forward(ids) - want).max() > 0.1 * np.abs(want).max()


def test_a_gguf_file_is_computed_where_it_is_mapped(tmp_path, monkeypatch):
    """The default for a GGUF the decoder computes: its blocks as they lie in one read-only
    mapping of the file, no conversion kept in the cache directory, no weight memory beyond a
    few float32 vectors."""
    monkeypatch.setenv("DRAFTLINE_CACHE_DIR", str(tmp_path))
    model, _ = load_model(SMALL)
    assert model.quant == "gguf" and model.native is not None
    assert not (tmp_path / "weights").exists() or not any((tmp_path / "weights").iterdir())
    layer = model.layers[0]
    for w in [model.embed, layer.wo] + layer.wqkv.parts:
        base = w.data
        while not isinstance(base, mmap.mmap) and base is not None:
            base = base.base if isinstance(base, np.ndarray) else base.obj
        assert isinstance(base, mmap.mmap)
    memory = model.memory()
    assert memory["weights_mapped"] > 0.9 * model_path(SMALL).stat().st_size
    assert memory["weights_held"] < 2**20 and memory["copies"] == 0
    # the decoder reads the model's float32 vectors where they are: no copy, counted once
    assert model.native.own_bytes == model.native.cos.nbytes + model.native.sin.nbytes


def test_an_int4_model_is_never_packed_for_torch_when_the_decoder_runs_it():
    """One layout in memory: the native decoder reads the plain one, prefill included."""
    model = TorchLlama(random_weights(0, vocab=64, hidden=64, layers=2), torch.bfloat16, max_len=256, quant="int4")
    assert model.native is not None
    model.forward(list(range(40)), logits=False)
    model.forward([1, 2, 3])
    assert all(layer.wqkv._packed is None for layer in model.layers)


def test_families_it_does_not_compute_keep_the_torch_code():
    """A model with per-head q/k norms (Qwen3) is not one decoder.c computes."""
    weights = random_weights(0, vocab=64, hidden=64, layers=1)
    tensors = dict(weights.tensors, **{"layers.0.q_norm": torch.ones(16), "layers.0.k_norm": torch.ones(16)})
    model = TorchLlama(dataclasses.replace(weights, tensors=tensors), torch.bfloat16, max_len=64, quant="int8")
    assert model.native is None
    assert np.isfinite(model.forward([1, 2, 3])).all()


@pytest.mark.integration  # compiles the library again
def test_a_corrupt_kept_library_is_built_again(tmp_path, monkeypatch):
    """A file under the library's key that does not load (cut short, overwritten) costs a
    build, not the decoder."""
    monkeypatch.setenv("DRAFTLINE_CACHE_DIR", str(tmp_path))
    path = native.library_path(native._compiler())
    path.write_bytes(b"not a shared library")
    native.load_library.cache_clear()
    try:
        assert native.load_library() is not None
        assert path.read_bytes()[:4] == b"\x7fELF"
    finally:
        native.load_library.cache_clear()


def test_a_failed_build_is_remembered_and_the_opt_out_is_honoured(tmp_path, monkeypatch):
    """A compiler that fails costs one attempt, not one per start (the failure is kept under the
    library's key, with the reason); DRAFTLINE_NATIVE=0 turns the decoder off without building."""
    monkeypatch.setenv("DRAFTLINE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CFLAGS", "-fno-such-flag-anywhere")
    native.load_library.cache_clear()
    try:
        assert native.load_library() is None
        failed = native.library_path(native._compiler()).with_suffix(".failed")
        assert "no-such-flag" in failed.read_text()
        native.load_library.cache_clear()
        started = list(tmp_path.rglob("*"))
        assert native.load_library() is None
        assert list(tmp_path.rglob("*")) == started  # nothing built or written again
        monkeypatch.delenv("CFLAGS")
        monkeypatch.setenv("DRAFTLINE_NATIVE", "0")
        native.load_library.cache_clear()
        assert native.load_library() is None
        assert not native.library_path(native._compiler()).exists()
    finally:
        native.load_library.cache_clear()


@pytest.mark.integration  # the embedded model loaded whole
def test_a_cancelled_prefill_pass_stops_after_the_layer_in_flight():
    """On the native backend a prefill chunk is one wide pass; a cancel set while it runs ends
    it after the layer in flight (here set before it starts: after the first layer, whose keys
    are written while the next layers' are not). Nothing is appended, and the cache then
    computes what a fresh one does."""
    model, _ = load_model(SMALL)
    tokens = _embedded_tokens()
    model.truncate(0)
    model.forward(tokens[:100], logits=False)
    untouched = np.uint16(0x7FC1)  # a NaN no pass writes
    model.k_cache[:, :, 100:PREFIX] = untouched
    cancel = threading.Event()
    cancel.set()
    assert model.prefill_pass(tokens[100:PREFIX], cancel) is False
    assert model.length == 100
    assert (model.k_cache[0, :, 100:PREFIX] != untouched).all()  # layer 0 ran
    assert (model.k_cache[1:, :, 100:PREFIX] == untouched).all()  # the others did not
    assert model.sync(tokens[:PREFIX], cancel) == 100 and model.length == 100  # nothing more
    model.sync(tokens[:PREFIX])
    got = model.forward(tokens[PREFIX:PREFIX + 4])
    model.truncate(0)
    model.forward(tokens[:PREFIX], logits=False)
    assert np.array_equal(model.forward(tokens[PREFIX:PREFIX + 4]), got)


@pytest.mark.integration  # the embedded model loaded whole
def test_a_stopped_prefill_goes_on_from_the_layer_it_reached():
    """A cancelled prefill pass keeps the layers it did: the next prefill pass in that KV cache
    that starts with its tokens goes on from there (here one layer per pass, the cancel set
    before each), also after passes in another cache, and the cache then computes what an
    uninterrupted prefill does, bit for bit. A pass that shares only its first tokens finishes
    those and leaves the rest resumable; a pass of other tokens drops it."""
    model, _ = load_model(SMALL)
    tokens, layers = _embedded_tokens(), model.config.n_layers
    cancel = threading.Event()
    cancel.set()
    model.truncate(0)
    model.forward(tokens[:100], logits=False)
    untouched = np.uint16(0x7FC1)  # a NaN no pass writes
    model.k_cache[:, :, 100:PREFIX] = untouched
    for done in range(1, layers):
        assert model.prefill_pass(tokens[100:PREFIX], cancel) is False
        assert model.length == 100 and model.resumable(0) == tokens[100:PREFIX]
        assert (model.k_cache[:done, :, 100:PREFIX] != untouched).all()
        assert (model.k_cache[done:, :, 100:PREFIX] == untouched).all()
        model.use_cache(1)  # another cache's passes leave it be
        model.forward(tokens[:8], logits=False)
        model.use_cache(0)
    assert model.prefill_pass(tokens[100:PREFIX], cancel) is True  # the last layer: nothing to stop
    assert model.length == PREFIX and model.resumable(0) == []
    got = model.forward(tokens[PREFIX:PREFIX + 4])

    model.truncate(100)
    assert model.prefill_pass(tokens[100:PREFIX], cancel) is False
    model.forward(tokens[100:130], logits=False)  # finishes these, from layer 1
    assert model.length == 130 and model.resumable(0) == tokens[130:PREFIX]
    model.forward(tokens[130:PREFIX], logits=False)
    assert np.array_equal(model.forward(tokens[PREFIX:PREFIX + 4]), got)

    model.truncate(100)
    assert model.prefill_pass(tokens[100:PREFIX], cancel) is False
    model.forward(tokens[101:PREFIX], logits=False)  # other tokens at these positions
    assert model.resumable(0) == []
    model.truncate(0)
    model.forward(tokens[:PREFIX], logits=False)
    assert np.array_equal(model.forward(tokens[PREFIX:PREFIX + 4]), got)


def test_the_probes_give_bench_kernels_a_peak_and_a_read_rate_to_measure_against(library):
    """probe.c's two ceilings are positive rates, and `bench --kernels` gives a pass its share of
    each: int8 operations (2 per weight and token) over the peak, the weights' bytes at the read
    rate over the pass's time."""
    from lsp_server.bench.kernels import format_kernels, report

    assert library.draftline_int8_peak(10_000) > 0
    memory = np.ones(1 << 20, dtype=np.uint8)
    assert library.draftline_read_rate(memory.ctypes.data, memory.nbytes) > 0
    limits = {"int8_ops_per_s": 1e12, "read_bytes_per_s": 1e10}
    times = {"prefill_s": 2.0, "pass_s": {1: 0.1, 4: 0.2}}
    got = report(limits, times, weights=10**9, weight_bytes=5 * 10**8)
    assert got["passes"][4]["share_of_peak"] == pytest.approx(2 * 10**9 * 4 / 0.2 / 1e12)
    assert got["passes"][1]["share_of_read_floor"] == pytest.approx(0.05 / 0.1)
    assert got["passes"][4]["of_one_token_pass"] == pytest.approx(2.0)
    assert got["prefill"]["tokens_per_s"] == pytest.approx(512 / 2.0)
    text = format_kernels({"cpu": "a CPU", "cores": 2, "limits": limits, **got})
    assert text.startswith("a CPU, 2 cores: int8 peak 1000 GOP/s, read 10.0 GB/s\n")
    assert " 4 tokens:  200.0 ms (2.00 x one)" in text and text.endswith("of the read floor\n")


@pytest.mark.parametrize("qtype", [Q.Q4_K, Q.Q5_K, Q.Q6_K], ids=lambda t: t.name)
def test_a_k_quant_repacked_into_panels_multiplies_as_its_blocks(qtype, library):
    """Where the library's panels run without AMX tiles (sixteen rows with AVX-512 VNNI, four
    with AVX2), a K-quant part is repacked at load into their order and every pass width runs on
    them: a token gets the same bits as from the file's blocks, at every width, and a head cut to
    a prefix of its rows keeps those rows' results."""
    m = _blocks(qtype, rows=48, cols=512, seed=2)
    matrix = native.c_matrix(m)
    repacked = Repacked(library, [matrix], threads=2, mapped=set())  # kept: it holds the panels
    if not repacked.nbytes:
        pytest.skip("no repacked panels where AMX tiles take the wide passes")
    assert matrix.parts[0].format == PACKED + int(qtype)
    x = torch.randn(SLABS, 512).numpy()
    for width in list(range(1, STEPS + 1)) + [17, WIDE, SLABS]:
        out = np.empty((width, 48), dtype=np.float32)
        library.draftline_matmul(ctypes.byref(matrix), width, x[:width].ctypes.data, out.ctypes.data)
        assert np.array_equal(out, native.product(library, m, x[:width])), width
    matrix.rows = matrix.parts[0].rows = 45  # as limit_vocab cuts a head: a panel's rows past the cut left out
    out = np.empty((3, 45), dtype=np.float32)
    library.draftline_matmul(ctypes.byref(matrix), 3, x[:3].ctypes.data, out.ctypes.data)
    assert np.array_equal(out, native.product(library, m, x[:3])[:, :45])


def test_a_model_repacked_at_load_computes_as_its_files_blocks(tmp_path, monkeypatch):
    """A model's K-quant matrices repacked into panels (where they run) give the logits the
    file's blocks give, and are counted as held memory in place of the file's pages."""
    path = gguf_files.write(tmp_path / "k.gguf", "qwen2", types=(Q.Q6_K, Q.Q4_K, Q.Q5_K))  # every matrix a K-quant
    packed = NativeLlama(map_gguf(path), max_len=512)
    if not packed.native.repacked.nbytes:
        pytest.skip("no repacked panels in this build (AVX-512 VNNI)")
    monkeypatch.setenv("DRAFTLINE_REPACK", "0")
    plain = NativeLlama(map_gguf(path), max_len=512)
    assert plain.native.repacked.nbytes == 0
    for model in (packed, plain):  # the head cut to a prefix of its rows, as a real vocabulary does
        model.limit_vocab(gguf_files.VOCAB - 5)
    assert packed.native._struct.head.parts[0].format > PACKED
    tokens = np.random.default_rng(1).integers(0, gguf_files.VOCAB - 5, PREFIX + 29).tolist()
    assert np.array_equal(_decode(packed, tokens, [1, 3, 8, 17]), _decode(plain, tokens, [1, 3, 8, 17]))
    ours, theirs = packed.memory(), plain.memory()
    assert ours["weights_held"] - theirs["weights_held"] == packed.native.repacked.nbytes
    assert ours["weights_mapped"] < theirs["weights_mapped"]
