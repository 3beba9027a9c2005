"""The native decoder (engine/native/): passes of int4/int8 models computed in C.

Checked against an independent route, the same weights dequantized into an fp32 model run by
the torch code, and for exactness by construction: a token's logits must be bit for bit the
same whatever the pass width, the thread count or the shape of the token tree. Both builds of
the products are tested here: the one for this CPU and the AVX2-only one."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from engine import native, weight_cache
from engine.backends.torch_llama import TorchLlama
from engine.kernels import QUANTIZED
from engine.models import embedded_target_path, load_model
from engine.native import NativeDecoder
from engine.tokenization import load_tokenizer
from engine.weights import LoadedWeights
from tests.code_samples import stdlib_text
from tests.tiny_models import random_weights

if native.load_library() is None:
    pytest.skip("no native decoder on this machine (needs a C compiler and AVX2/FMA)", allow_module_level=True)

PREFIX = 160  # prompt positions in the cache before the decoded ones
STEPS = 13  # tokens decoded after it
WIDE = 40  # a pass wider than the decoding tiles


@pytest.fixture(scope="module", params=["int4", "int8"])
def quantized(request) -> tuple[TorchLlama, LoadedWeights]:
    """The embedded model in a quantized dtype, and its converted weights."""
    model, _ = load_model("embedded", request.param)
    return model, weight_cache.load(embedded_target_path(), request.param)


@pytest.fixture(scope="module")
def tokens() -> list[int]:
    return load_tokenizer(embedded_target_path()).encode(stdlib_text("textwrap.py"))[:PREFIX + WIDE]


def _fp32_twin(weights: LoadedWeights, model: TorchLlama) -> TorchLlama:
    """The same model with every matrix dequantized: what the quantized one approximates."""
    tensors = {name: (w.dequantize(torch.float32) if isinstance(w, QUANTIZED) else w.float())
               for name, w in weights.tensors.items()}
    twin = TorchLlama(dataclasses.replace(weights, tensors=tensors), torch.float32, max_len=model.max_len)
    twin.limit_vocab(model.vocab_size)
    return twin


def _decode(model: TorchLlama, tokens: list[int], widths: list[int], threads: int = 2) -> torch.Tensor:
    """Logits of tokens[PREFIX:] decoded in passes of the given widths, after a prefill."""
    torch.set_num_threads(threads)
    model.truncate(0)
    model.forward(tokens[:PREFIX], logits=False)
    out, at = [], PREFIX
    for width in widths:
        out.append(model.forward(tokens[at:at + width]))
        at += width
    return torch.cat(out)


def test_the_default_model_decodes_natively(quantized):
    model, _ = quantized
    assert model.native is not None


def test_a_token_is_computed_alike_whatever_the_pass_width_and_threads(quantized, tokens):
    model, _ = quantized
    one_by_one = _decode(model, tokens, [1] * STEPS)
    for widths, threads in [([STEPS], 2), ([4, 9], 2), ([2, 3, 8], 1), ([STEPS], 1), ([1] * STEPS, 1)]:
        assert torch.equal(_decode(model, tokens, widths, threads), one_by_one), (widths, threads)


def test_a_prompt_wide_pass_computes_each_token_as_decoding_does(quantized, tokens):
    """Passes wider than the decoding tiles (prefill) take another route through the
    products (rows dequantized once per block); the results must not change."""
    model, _ = quantized
    assert torch.equal(_decode(model, tokens, [WIDE]), _decode(model, tokens, [1] * WIDE))


def test_a_token_tree_computes_each_branch_as_a_chain(quantized, tokens):
    """Tree: 0 -> 1 -> 3 and 0 -> 2 -> 4; each node's logits equal those of its path decoded
    one token at a time (the positions in between hold other branches)."""
    model, _ = quantized
    a, b, c, d, e = tokens[PREFIX:PREFIX + 5]
    model.truncate(0)
    model.forward(tokens[:PREFIX], logits=False)
    tree = model.forward([a, b, c, d, e], parents=[-1, 0, 0, 1, 2])
    for path, nodes in [([a, b, d], [0, 1, 3]), ([a, c, e], [0, 2, 4])]:
        model.truncate(PREFIX)
        chain = torch.cat([model.forward([token]) for token in path])
        assert torch.equal(tree[nodes], chain)


def test_a_prefill_records_the_same_features_as_decoding(quantized, tokens):
    """A feature-conditioned draft reads the final normed states of the target's prefill:
    they must be what a decoding pass of the same tokens records (normed once)."""
    model, _ = quantized
    model.record_features()
    model.truncate(0)
    model.forward(tokens[:PREFIX], logits=False)
    prefilled = model.features[:PREFIX].clone()
    model.truncate(0)
    model.forward(tokens[:PREFIX])
    assert torch.equal(model.features[:PREFIX], prefilled)


def test_logits_are_as_close_to_the_dequantized_model_as_the_torch_kernels(quantized, tokens):
    """The reference is the fp32 model on the same (dequantized) weights. The native
    decoder must be at least as close to it as the torch code's bf16 kernels are, and pick
    the same next token nearly everywhere."""
    model, weights = quantized
    want = _decode(_fp32_twin(weights, model), tokens, [STEPS])
    got = _decode(model, tokens, [1] * STEPS)
    decoder, model.native = model.native, None
    try:
        torch_kernels = _decode(model, tokens, [1] * STEPS)
    finally:
        model.native = decoder
    error, torch_error = ((x - want).abs().max().item() for x in (got, torch_kernels))
    assert error <= 1.1 * torch_error, (error, torch_error)
    assert (got.argmax(-1) == want.argmax(-1)).float().mean() >= 12 / 13


def test_the_avx2_build_computes_the_same_model(quantized, tokens, tmp_path):
    """The float32 products machines without AVX-512 get, built here with only AVX2 and FMA."""
    model, weights = quantized
    decoder = model.native
    try:
        model.native = NativeDecoder(native.build(tmp_path / "avx2.so", ["-mavx2", "-mfma", "-mf16c"]), model)
        one_by_one = _decode(model, tokens, [1] * STEPS)
        assert torch.equal(_decode(model, tokens, [5, 8]), one_by_one)
        want = _decode(_fp32_twin(weights, model), tokens, [STEPS])
        assert (one_by_one.argmax(-1) == want.argmax(-1)).float().mean() >= 12 / 13
    finally:
        model.native = decoder


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
    assert torch.isfinite(model.forward([1, 2, 3])).all()


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
