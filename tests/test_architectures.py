"""Every supported family computes exactly what transformers computes, from a Hugging Face
folder and from llama.cpp's GGUF conversions of it (F32, F16, Q8_0, Q4_K), with rope scaling
(linear, llama3, yarn) at positions past the original context; bad input fails fast in one line.

The models are tiny and randomly initialised with transformers; the GGUFs come from llama.cpp's
own convert_hf_to_gguf.py (`make test` unpacks it under .cache/). Quantized files are compared
against transformers run on the same weights quantized and dequantized, so every comparison is
float32 against float32 on identical weights: the tolerance only covers summation order.
"""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from engine.execution import native
from engine.loading.architectures import FAMILIES
from engine.execution.backends.torch_llama import TorchLlama
from engine.execution.backends.native_llama import NativeLlama
from engine.loading.formats.gguf_mapped import map_gguf, runs_mapped
from engine.tokenization import load_tokenizer
from engine.loading.formats.load import load_weights
from tests import hf_tiny
from tests.q4k import quantize_q4_k, requantize_q4_k
from tests.refusals import refused

pytestmark = pytest.mark.integration  # llama.cpp's converter (`make test` unpacks it) and transformers

pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")

ROOT = Path(__file__).resolve().parent.parent
CONVERTER = ROOT / ".cache/llama-cpp-python-0.3.16/llama_cpp_python-0.3.16/vendor/llama.cpp/convert_hf_to_gguf.py"
IDS = [(7 * i + 3) % 300 for i in range(80)]  # 80 positions: past the scaled models' 32
TYPES = ("f32", "f16", "q8_0")
ROPE_CASES = {  # name -> (family, rope_scaling in config.json)
    "linear": ("llama", {"rope_type": "linear", "factor": 4.0}),
    "llama3": ("llama", {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 32}),
    "yarn": ("qwen2", {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32}),
}
ATOL, RTOL = 2e-4, 1e-4  # float32 vs float32 on identical weights


@pytest.fixture(scope="module")
def zoo(tmp_path_factory) -> Path:
    """Tiny models of every family and rope case, with their GGUF conversions."""
    if not CONVERTER.exists():
        pytest.skip(f"llama.cpp's converter is missing ({CONVERTER}): run `make test`")
    root = tmp_path_factory.mktemp("zoo")
    jobs = []
    for i, family in enumerate(FAMILIES):
        hf_tiny.build(family, root / family, seed=i)
        jobs += [[str(root / family), t, str(root / f"{family}-{t}.gguf")] for t in TYPES]
    for name, (family, scaling) in ROPE_CASES.items():
        hf_tiny.build(family, root / name, seed=10, rope_scaling=scaling)
        jobs.append([str(root / name), "f32", str(root / f"{name}-f32.gguf")])
    (root / "jobs.json").write_text(json.dumps(jobs))
    done = subprocess.run([sys.executable, str(ROOT / "tests/convert_gguf.py"), str(CONVERTER),
                           str(root / "jobs.json")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    for family in FAMILIES:
        requantize_q4_k(root / f"{family}-f32.gguf", root / f"{family}-q4_k.gguf")
    return root


def reference(folder: Path, gguf_file: Path | None = None, **config_changes):
    """transformers' model from `folder`; with `gguf_file`, each weight goes through the same
    rounding the file applied to it (quantize, dequantize), in the Hugging Face layout."""
    import transformers

    config = transformers.AutoConfig.from_pretrained(folder)
    for key, value in config_changes.items():
        setattr(config, key, value)
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, config=config, dtype=torch.float32).eval()
    if gguf_file is None:
        return model
    types = {t.name: t.tensor_type for t in gguf.GGUFReader(gguf_file).tensors}
    family = load_weights(gguf_file).config.family
    to_gguf = {hf: g for c, (hf, g) in _names(family, config.num_hidden_layers).items()}
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.from_numpy(_round_trip(p.numpy(), types[to_gguf[name]])))
    return model


def _names(family: str, n_layers: int) -> dict[str, tuple[str, str]]:
    from engine.loading.architectures import expand

    hf, gg = (expand(FAMILIES[family].names(fmt), n_layers) for fmt in ("hf", "gguf"))
    return {c: (hf[c], gg[c]) for c in hf}


def _round_trip(w: np.ndarray, qtype) -> np.ndarray:
    from gguf.quants import dequantize, quantize

    t = gguf.GGMLQuantizationType
    if qtype == t.F32:
        return w
    if qtype == t.F16:
        return w.astype(np.float16).astype(np.float32)
    blocks = quantize_q4_k(w) if qtype == t.Q4_K else quantize(w, qtype)
    return dequantize(blocks, qtype).astype(np.float32)


def ours(path: Path, **kwargs) -> TorchLlama:
    return TorchLlama(load_weights(path), dtype=torch.float32, max_len=128, **kwargs)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_hf_folder_logits_equal_transformers(zoo, family):
    want = hf_tiny.logits(reference(zoo / family), IDS)
    model = ours(zoo / family)
    torch.testing.assert_close(torch.from_numpy(model.forward(IDS)), want, atol=ATOL, rtol=RTOL)
    model.truncate(0)  # the same through the cache, in two passes
    model.forward(IDS[:50], logits=False)
    torch.testing.assert_close(torch.from_numpy(model.forward(IDS[50:])), want[50:], atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize("qtype", TYPES + ("q4_k",))
@pytest.mark.parametrize("family", list(FAMILIES))
def test_gguf_logits_equal_transformers_on_dequantized_weights(zoo, family, qtype):
    file = zoo / f"{family}-{qtype}.gguf"
    want = hf_tiny.logits(reference(zoo / family, file), IDS)
    torch.testing.assert_close(torch.from_numpy(ours(file).forward(IDS)), want, atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize("case", list(ROPE_CASES))
def test_rope_scaling_equals_transformers(zoo, case):
    theta = json.loads((zoo / case / "config.json").read_text())["rope_theta"]
    unscaled = reference(zoo / case, rope_parameters={"rope_type": "default", "rope_theta": theta})
    want = hf_tiny.logits(reference(zoo / case), IDS)
    assert (hf_tiny.logits(unscaled, IDS) - want).abs().max() > 0.05  # the scaling matters here
    torch.testing.assert_close(torch.from_numpy(ours(zoo / case).forward(IDS)), want, atol=ATOL, rtol=RTOL)
    torch.testing.assert_close(torch.from_numpy(ours(zoo / f"{case}-f32.gguf").forward(IDS)), want, atol=ATOL, rtol=RTOL)


def test_bf16_checkpoint_as_transformers_5_saves_it(zoo, tmp_path):
    """bfloat16 safetensors, and a config.json with `rope_parameters` instead of `rope_theta`."""
    model = reference(zoo / "qwen3")
    with torch.no_grad():  # the weights bfloat16 stores, computed in float32
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).float())
    want = hf_tiny.logits(model, IDS)
    model.to(torch.bfloat16).save_pretrained(tmp_path, safe_serialization=True)
    assert "rope_parameters" in json.loads((tmp_path / "config.json").read_text())
    torch.testing.assert_close(torch.from_numpy(ours(tmp_path).forward(IDS)), want, atol=ATOL, rtol=RTOL)


def test_padding_tokens_of_a_converted_gguf_are_never_chosen(zoo):
    weights = load_weights(zoo / "qwen2-f32.gguf")  # 320 rows; the converter padded 300 tokens
    tokenizer = load_tokenizer(zoo / "qwen2-f32.gguf")
    assert tokenizer.vocab_size == hf_tiny.VOCAB
    real = tokenizer.tokens_in_use
    assert real == hf_tiny.TOKENS
    model = TorchLlama(weights, dtype=torch.float32, max_len=128)
    model.limit_vocab(real)
    logits = model.forward(IDS)
    assert logits.shape[-1] == hf_tiny.VOCAB and np.isinf(logits[:, real:]).all()


def test_sliding_window_caps_the_context(zoo, tmp_path):
    folder = tmp_path / "windowed"
    hf_tiny.build("starcoder2", folder, sliding_window=64)
    assert ours(folder).max_len == 64


# --- bad input: one clear line, before any weight is read -------------------------------------

def _fails_fast(path: Path, match: str) -> None:
    refused(load_weights, path, match)


def test_unsupported_gguf_architecture(tmp_path):
    path = tmp_path / "gpt2.gguf"
    writer = gguf.GGUFWriter(path, "gpt2")
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    _fails_fast(path, "GGUF architecture 'gpt2' is not supported")


def test_truncated_gguf(zoo, tmp_path):
    whole = (zoo / "llama-q8_0.gguf").read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(whole[:len(whole) * 2 // 3])
    _fails_fast(cut, "truncated GGUF|not a valid GGUF")


def test_truncated_safetensors(zoo, tmp_path):
    for f in (zoo / "llama").iterdir():
        (tmp_path / f.name).write_bytes(f.read_bytes())
    whole = (tmp_path / "model.safetensors").read_bytes()
    (tmp_path / "model.safetensors").write_bytes(whole[:len(whole) // 2])
    _fails_fast(tmp_path, "truncated safetensors")


def test_pickle_only_folder(tmp_path):
    hf_tiny.write_tokenizer(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    (tmp_path / "pytorch_model.bin").write_bytes(b"\x80\x04")
    _fails_fast(tmp_path, "pickled checkpoints are refused")


def test_unsupported_rope_scaling(zoo, tmp_path):
    folder = tmp_path / "dynamic"
    hf_tiny.build("llama", folder, rope_scaling={"rope_type": "dynamic", "factor": 2.0})
    _fails_fast(folder, "rope scaling 'dynamic' is not supported")


def test_wrong_shape_is_caught_from_the_header(zoo, tmp_path):
    folder = tmp_path / "lying"
    folder.mkdir()
    for f in (zoo / "qwen2").iterdir():
        (folder / f.name).write_bytes(f.read_bytes())
    raw = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(raw | {"intermediate_size": 1024}))
    _fails_fast(folder, "has shape .* the hyper-parameters say")


@pytest.mark.parametrize("family", list(FAMILIES))
def test_int4_computes_the_files_q4_k_weights(zoo, family):
    """--dtype int4 reads the Q4_K blocks as they are (engine/loading/formats/gguf_int4.py) and
    computes with bf16 activations: the same model as transformers on the dequantized
    weights, to bf16's precision."""
    from engine.execution.kernels import Int4Weight

    file = zoo / f"{family}-q4_k.gguf"
    model = TorchLlama(load_weights(file, four_bit=True), max_len=128, quant="int4")
    assert any(isinstance(w, Int4Weight) for layer in model.layers for w in vars(layer).values())
    if native.load_library() is not None:  # the C decoder computes these two (docs/native.md)
        assert (model.native is not None) == (family in ("llama", "qwen2"))
    want = hf_tiny.logits(reference(zoo / family, file), IDS)
    got = torch.from_numpy(model.forward(IDS))
    assert (got - want).abs().max() < 0.05 * want.abs().max()
    assert (got.argmax(-1) == want.argmax(-1)).float().mean() > 0.9


@pytest.mark.parametrize("qtype", TYPES + ("q4_k",))
@pytest.mark.parametrize("family", list(FAMILIES))
def test_the_native_decoder_computes_the_gguf_where_it_is_mapped(zoo, family, qtype):
    """dtype gguf, the default where the native decoder runs (llama and qwen2 here): the
    file's blocks multiplied where they lie, activations quantized to int8 (a scale per 16 or 128 values), a
    bf16 KV cache, llama's Q/K rows in llama.cpp's order (rotated pairwise). Float files come
    within 0.5% of the logits' range of transformers on the same weights, quantized ones
    within 2% (the activations' rounding), with the same argmax nearly everywhere. Other families
    fall back to the torch kernels. (Measured here: 0.06-0.12% for float files, 0.2-0.6% for
    Q8_0 and Q4_K; bounds 0.5% and 2%.)"""
    if native.load_library() is None:
        pytest.skip("no native decoder on this machine")
    file = zoo / f"{family}-{qtype}.gguf"
    assert runs_mapped(file) == (family in ("llama", "qwen2"))
    if not runs_mapped(file):
        return
    model = NativeLlama(map_gguf(file), max_len=128)
    want = hf_tiny.logits(reference(zoo / family, file), IDS)
    got = torch.from_numpy(model.forward(IDS))
    error = (got - want).abs().max() / want.abs().max()
    assert error <= (0.005 if qtype in ("f32", "f16") else 0.02)
    assert (got.argmax(-1) == want.argmax(-1)).float().mean() > 0.9
