"""Tiny GGUF files with a chosen ggml type for each matrix, so that the native decoder is tested
on every format it reads, alone and stacked with others (Q/K/V, gate/up) as Q4_K_M files mix
them. Weights are random; K-quants other than Q4_K (which gguf-py cannot write) are random
blocks with sane scales, as llama.cpp would have written some matrix."""
from __future__ import annotations

from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import GGUFWriter
from gguf.quants import quantize

from tests.q4k import quantize_q4_k

# bytes per 256-column block, and where its float16 scales lie
_RANDOM_K = {Q.Q5_K: (176, (0, 2)), Q.Q6_K: (210, (208,))}
# Every matrix type, cycled over the matrices so that each fused matrix mixes formats.
TYPES = (Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0, Q.Q4_K, Q.Q5_K, Q.Q6_K, Q.F16, Q.BF16, Q.F32)
HIDDEN, FFN, HEADS, KV_HEADS, LAYERS, VOCAB = 256, 512, 4, 2, 2, 320


def encode(w: np.ndarray, qtype: Q, rng: np.random.Generator) -> np.ndarray:
    """Rows of float weights [rows, cols] in `qtype`'s blocks: uint8 [rows, bytes per row]."""
    if qtype == Q.Q4_K:
        return quantize_q4_k(w)
    if qtype in _RANDOM_K:
        size, scales = _RANDOM_K[qtype]
        blocks = rng.integers(0, 256, size=(w.shape[0], w.shape[1] // 256, size), dtype=np.uint8)
        for at in scales:
            blocks[:, :, at:at + 2] = np.frombuffer(np.float16(0.002).tobytes(), dtype=np.uint8)
        return blocks.reshape(w.shape[0], -1)
    return np.ascontiguousarray(quantize(w.astype(np.float32), qtype)).view(np.uint8).reshape(w.shape[0], -1)


def write(path: Path, arch: str = "llama", types: tuple[Q, ...] = TYPES, seed: int = 0) -> Path:
    """A 2-layer model of `arch` (llama: Q/K rows as llama.cpp's converter permutes them;
    qwen2: with Q/K/V biases) whose matrices take `types` in turn."""
    rng = np.random.default_rng(seed)
    hd = HIDDEN // HEADS
    matrices = {"token_embd.weight": (VOCAB, HIDDEN), "output.weight": (VOCAB, HIDDEN)}
    vectors = {"output_norm.weight": HIDDEN}
    for i in range(LAYERS):
        b = f"blk.{i}."
        matrices |= {b + "attn_q.weight": (HEADS * hd, HIDDEN), b + "attn_k.weight": (KV_HEADS * hd, HIDDEN),
                     b + "attn_v.weight": (KV_HEADS * hd, HIDDEN), b + "attn_output.weight": (HIDDEN, HEADS * hd),
                     b + "ffn_gate.weight": (FFN, HIDDEN), b + "ffn_up.weight": (FFN, HIDDEN),
                     b + "ffn_down.weight": (HIDDEN, FFN)}
        vectors |= {b + "attn_norm.weight": HIDDEN, b + "ffn_norm.weight": HIDDEN}
        if arch == "qwen2":
            vectors |= {b + "attn_q.bias": HEADS * hd, b + "attn_k.bias": KV_HEADS * hd,
                        b + "attn_v.bias": KV_HEADS * hd}
    writer = GGUFWriter(path, arch)
    writer.add_context_length(256)
    writer.add_embedding_length(HIDDEN)
    writer.add_feed_forward_length(FFN)
    writer.add_block_count(LAYERS)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list([f"t{i}" for i in range(VOCAB)])
    writer.add_token_types([1] * VOCAB)
    writer.add_token_merges(["t 1"])
    for n, (name, shape) in enumerate(matrices.items()):
        w = rng.standard_normal(shape).astype(np.float32) * (0.5 if "embd" in name else 1 / np.sqrt(shape[1]))
        writer.add_tensor(name, encode(w, types[n % len(types)], rng), raw_dtype=types[n % len(types)])
    for name, size in vectors.items():
        values = 1 + 0.1 * rng.standard_normal(size) if "norm" in name else 0.1 * rng.standard_normal(size)
        writer.add_tensor(name, values.astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
