"""A synthetic Q4_K_M GGUF with the real shapes of a 7B code model, to measure loading memory.

    python scripts/synthetic_gguf.py write /tmp/qwen7b.gguf --shape qwen2.5-coder-7b
    /usr/bin/time -v python scripts/synthetic_gguf.py load /tmp/qwen7b.gguf [--dtype gguf|int4|int8]

The blocks are random (with sane scales), so the model computes nonsense; what matters is that
every tensor has the size and quantization type of the real file (Q4_K, with Q6_K for the output
head and for attn_v/ffn_down in llama.cpp's "more bits" layers). Several GB: keep it in /tmp.
"""
from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

import numpy as np

SHAPES = {
    # name: (arch, vocab, hidden, ffn, layers, heads, kv heads, rope theta, q/k/v biases)
    "qwen2.5-coder-7b": ("qwen2", 152064, 3584, 18944, 28, 28, 4, 1e6, True),
    "codellama-7b": ("llama", 32016, 4096, 11008, 32, 32, 32, 1e6, False),
}
_BLOCK_BYTES = {"Q4_K": 144, "Q6_K": 210}
_SCALE_AT = {"Q4_K": (0, 2), "Q6_K": (208,)}  # offsets of the float16 scales in a block


def _more_bits(i: int, n: int) -> bool:
    """llama.cpp's Q4_K_M gives these layers' attn_v and ffn_down Q6_K."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def _blocks(rows: int, cols: int, kind: str, rng: np.random.Generator) -> np.ndarray:
    data = rng.integers(0, 256, size=(rows, cols // 256, _BLOCK_BYTES[kind]), dtype=np.uint8)
    for at in _SCALE_AT[kind]:  # random bytes would make inf/nan scales
        data[:, :, at:at + 2] = np.frombuffer(np.float16(2e-4).tobytes(), dtype=np.uint8)
    return data.reshape(rows, -1)


def write(path: Path, shape: str) -> None:
    from gguf import GGMLQuantizationType, GGUFWriter

    arch, vocab, hidden, ffn, layers, heads, kv, theta, biases = SHAPES[shape]
    hd = hidden // heads
    w = GGUFWriter(path, arch)
    w.add_context_length(32768)
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(ffn)
    w.add_block_count(layers)
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_rope_freq_base(theta)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_tokenizer_model("gpt2")
    w.add_token_list([f"t{i}" for i in range(vocab)])
    w.add_token_types([1] * vocab)
    w.add_token_merges(["t 1"])
    tensors: list[tuple[str, tuple[int, ...], str]] = [("token_embd.weight", (vocab, hidden), "Q4_K")]
    for i in range(layers):
        b = f"blk.{i}."
        v_kind = "Q6_K" if _more_bits(i, layers) else "Q4_K"
        tensors += [(b + "attn_norm.weight", (hidden,), "F32"), (b + "ffn_norm.weight", (hidden,), "F32"),
                    (b + "attn_q.weight", (heads * hd, hidden), "Q4_K"),
                    (b + "attn_k.weight", (kv * hd, hidden), "Q4_K"),
                    (b + "attn_v.weight", (kv * hd, hidden), v_kind),
                    (b + "attn_output.weight", (hidden, heads * hd), "Q4_K"),
                    (b + "ffn_gate.weight", (ffn, hidden), "Q4_K"), (b + "ffn_up.weight", (ffn, hidden), "Q4_K"),
                    (b + "ffn_down.weight", (hidden, ffn), v_kind)]
        if biases:
            tensors += [(b + "attn_q.bias", (heads * hd,), "F32"), (b + "attn_k.bias", (kv * hd,), "F32"),
                        (b + "attn_v.bias", (kv * hd,), "F32")]
    tensors += [("output_norm.weight", (hidden,), "F32"), ("output.weight", (vocab, hidden), "Q6_K")]
    for name, dims, kind in tensors:  # header first; the data follows one tensor at a time
        nbytes = 4 * dims[0] if kind == "F32" else dims[0] * dims[1] // 256 * _BLOCK_BYTES[kind]
        byte_shape = dims if kind == "F32" else (dims[0], dims[1] // 256 * _BLOCK_BYTES[kind])
        w.add_tensor_info(name, byte_shape, np.dtype(np.float32 if kind == "F32" else np.uint8), nbytes,
                          raw_dtype=GGMLQuantizationType[kind])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    rng = np.random.default_rng(0)
    for name, dims, kind in tensors:
        w.write_tensor_data(np.ones(dims, np.float32) if kind == "F32" else _blocks(*dims, kind, rng))
    w.close()


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def load(path: Path, dtype: str) -> None:
    from engine.execution.backends.native_llama import NativeLlama
    from engine.loading.formats.gguf_mapped import map_gguf

    base = _rss_mb()
    start = time.perf_counter()
    if dtype == "gguf":  # as a user's start runs it: no torch
        weights = map_gguf(path)
        header = time.perf_counter() - start
        model = NativeLlama(weights, max_len=512)
    else:
        from engine.execution.backends.torch_llama import TorchLlama
        from engine.execution.kernels import QUANT
        from engine.models import torch_dtype
        from engine.loading.formats.load import load_weights

        weights = load_weights(path, four_bit=dtype == "int4")
        header = time.perf_counter() - start
        model = TorchLlama(weights, torch_dtype(dtype), max_len=512, quant=dtype if dtype in QUANT else None)
    model.set_threads(2)
    loaded = time.perf_counter() - start
    logits = model.forward([1, 2, 3])
    model.use_plan(model.plan)  # the stored format everywhere, as calibration leaves it where nothing is faster
    passes = {}
    for width in (1, 13):  # decoding passes (best of 3), as a completion runs them
        times = []
        for _ in range(3):
            model.truncate(3)
            started = time.perf_counter()
            model.forward(list(range(4, 4 + width)))
            times.append(time.perf_counter() - started)
        passes[width] = min(times) * 1e3
    memory = model.memory()
    final_mb = (model.weight_bytes + memory["kv_cache"]) / 2**20
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    sys.stdout.write(
        f"{path.name} as {dtype}: header {header:.2f} s, loaded in {loaded:.1f} s; weights + KV cache "
        f"{final_mb:.0f} MB; RSS before loading {base:.0f} MB, after {_rss_mb():.0f} MB, peak {peak_mb:.0f} MB "
        f"(limit 1.3 x final + 300 MB + start = {1.3 * final_mb + 300 + base:.0f} MB); "
        f"logits {tuple(logits.shape)}; a 1-token pass {passes[1]:.0f} ms, 13 tokens {passes[13]:.0f} ms "
        f"({'native decoder' if model.capabilities.native else 'torch kernels'})\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    w = sub.add_parser("write")
    w.add_argument("path", type=Path)
    w.add_argument("--shape", choices=SHAPES, default="qwen2.5-coder-7b")
    lo = sub.add_parser("load")
    lo.add_argument("path", type=Path)
    lo.add_argument("--dtype", default="gguf", choices=("gguf", "int8", "int4", "bf16", "fp32"))
    args = parser.parse_args()
    if args.command == "write":
        write(args.path, args.shape)
    else:
        load(args.path, args.dtype)


if __name__ == "__main__":
    main()
