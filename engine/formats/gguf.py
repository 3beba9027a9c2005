"""GGUF files (llama.cpp): any tensor type gguf-py can dequantize, K-quants included.

Two ways in:
- `map_gguf`: where the native decoder runs the file (engine/native/), its matrices stay in
  their blocks where the file is mapped (engine/formats/gguf_blocks.py): nothing is converted,
  and the weights' memory is the file's pages, shared with the page cache.
- `open_gguf`: tensors read with plain file reads and dequantized (in row chunks, so numpy's
  temporaries stay small even for a 150k-row output head), for the torch kernels.
"""
from __future__ import annotations

import mmap
from pathlib import Path

import numpy as np
import torch

from engine.architectures import FAMILIES, GGUF_ARCHITECTURES
from engine.errors import ModelLoadError
from engine.formats.gguf_blocks import NATIVE_TYPES, BlockMatrix
from engine.formats.gguf_header import Header, TensorInfo, read_header
from engine.formats.gguf_int4 import FOUR_BIT, read_int4
from engine.kernels import QUANTIZED, Int8Weight, Weight
from engine.rope import RopeScaling
from engine.weights import LazyTensors, LlamaConfig, LoadedWeights, plan_tensors

_ROPE_FREQS = "rope_freqs.weight"  # llama3 rope scaling: per-frequency divisors
_CHUNK_ELEMENTS = 1 << 24  # dequantize this many weights at a time
_PERMUTED = (".wq", ".wk", ".bq", ".bk")
_FLOAT_TYPES = (0, 1, 30)  # ggml F32, F16, BF16


def open_gguf(path: Path, four_bit: bool = False) -> LoadedWeights:
    """The file's tensors, read lazily as float; with `four_bit`, its Q4_0/Q4_1/Q4_K matrices
    as Int4Weight and its other quantized matrices as Int8Weight (more than 4 bits each: int8
    keeps nearly all of them)."""
    header = read_header(path)
    config = _config(header, path)
    shapes = {name: t.shape for name, t in header.tensors.items()}
    plan = plan_tensors(config, "gguf", shapes, lambda name: name == _ROPE_FREQS, path)
    _check_types(path, [header.tensors[name] for name in plan.values()])
    permuted = FAMILIES[config.family].gguf_permuted_qk

    def read(canonical: str) -> Weight:
        info = header.tensors[plan[canonical]]
        if four_bit and info.ggml_type in FOUR_BIT:
            w = read_int4(path, info)
        else:
            w = _read_tensor(path, info)
            if four_bit and len(info.shape) == 2 and info.ggml_type not in _FLOAT_TYPES:
                w = Int8Weight.quantize(w)
        if permuted and canonical.endswith(_PERMUTED):
            heads = config.n_heads if canonical.endswith((".wq", ".bq")) else config.n_kv_heads
            order = _unpermute_rotary(torch.arange(info.shape[0]), heads)
            w = w.select(order) if isinstance(w, QUANTIZED) else w[order]
        return w

    return LoadedWeights(config, LazyTensors(list(plan), read), path)


_MADV_POPULATE_READ = 22  # Linux 5.14+: map a range's pages now (mmap has no name for it yet)


def _populate(mapped: mmap.mmap, tensors: list[TensorInfo]) -> None:
    """Map the pages of these tensors now, in a few calls over the ranges they cover, so that
    the first pass does not fault them in one by one; older kernels get a read-ahead hint."""
    ranges: list[list[int]] = []
    for t in sorted(tensors, key=lambda t: t.offset):
        start = t.offset // mmap.PAGESIZE * mmap.PAGESIZE
        if ranges and start <= ranges[-1][1] + (1 << 20):
            ranges[-1][1] = max(ranges[-1][1], t.offset + t.nbytes)
        else:
            ranges.append([start, t.offset + t.nbytes])
    for start, end in ranges:
        try:
            mapped.madvise(_MADV_POPULATE_READ, start, end - start)
        except OSError:
            mapped.madvise(mmap.MADV_WILLNEED, start, end - start)


def map_gguf(path: Path) -> LoadedWeights:
    """The file's matrices as BlockMatrix views of one read-only mapping of it (the pages every
    pass reads mapped now), its vectors as float32.
    Q/K rows stay in the file's order: for the families llama.cpp permutes, the native decoder
    rotates adjacent pairs (LoadedWeights.rotary_pairs)."""
    header = read_header(path)
    config = _config(header, path)
    plan = plan_tensors(config, "gguf", {name: t.shape for name, t in header.tensors.items()},
                        lambda name: name == _ROPE_FREQS, path)
    with open(path, "rb") as f:
        mapped = mmap.mmap(f.fileno(), 0, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
    # Every pass reads all but an untied embedding, which only gives the rows looked up.
    _populate(mapped, [header.tensors[name] for canonical, name in plan.items()
                       if canonical != "embed" or config.tie_embeddings])
    raw = np.frombuffer(mapped, dtype=np.uint8)
    tensors: dict[str, Weight] = {}
    for canonical, name in plan.items():
        info = header.tensors[name]
        if len(info.shape) == 2:
            rows = raw[info.offset:info.offset + info.nbytes].reshape(info.shape[0], -1)
            tensors[canonical] = BlockMatrix(info.ggml_type, rows, info.shape[1])
        else:
            tensors[canonical] = _read_tensor(path, info).float()
    return LoadedWeights(config, tensors, path, rotary_pairs=FAMILIES[config.family].gguf_permuted_qk)


def runs_mapped(path: Path) -> bool:
    """Whether the native decoder computes this file where it is mapped: a family and shapes
    it computes, every matrix in a type it reads, and a decoder built for this machine."""
    from engine import native

    try:
        header = read_header(path)
        config = _config(header, path)
        plan = plan_tensors(config, "gguf", {name: t.shape for name, t in header.tensors.items()},
                            lambda name: name == _ROPE_FREQS, path)
    except ModelLoadError:
        return False  # loading it will say what is wrong
    infos = [header.tensors[name] for name in plan.values()]
    if not native.computes(config, set(plan)) or any(
            len(t.shape) == 2 and (t.ggml_type not in NATIVE_TYPES or t.shape[1] % 32) for t in infos):
        return False
    return native.load_library() is not None


def stored_in_4_bits(path: Path) -> bool:
    """Whether most of the layers' matrices are 4-bit blocks (a Q4_0, Q4_1 or Q4_K_M file)."""
    matrices = [t for name, t in read_header(path).tensors.items()
                if name.startswith("blk.") and len(t.shape) == 2]
    return sum(t.ggml_type in FOUR_BIT for t in matrices) * 2 > len(matrices)


def _config(header: Header, path: Path) -> LlamaConfig:
    """Hyper-parameters from the metadata, or ModelLoadError for what we do not compute."""
    fields, infos = header.fields, header.tensors
    arch = fields.get("general.architecture")
    if arch not in GGUF_ARCHITECTURES:
        raise ModelLoadError(f"{path}: GGUF architecture {arch!r} is not supported "
                             f"(supported: {', '.join(sorted(GGUF_ARCHITECTURES))})")
    family_name = GGUF_ARCHITECTURES[arch]
    tokens = fields.get("tokenizer.ggml.tokens")
    if tokens is None:
        raise ModelLoadError(f"{path}: no tokenizer in the GGUF metadata (tokenizer.ggml.tokens)")
    if "token_embd.weight" not in infos:
        raise ModelLoadError(f"{path}: no token embedding (token_embd.weight)")
    vocab = infos["token_embd.weight"].shape[0]
    if len(tokens) > vocab:
        raise ModelLoadError(f"{path}: {len(tokens)} tokens but only {vocab} embedding rows")

    def get(key: str, default=None):
        value = fields.get(f"{arch}.{key}", default)
        if value is None:
            raise ModelLoadError(f"{path}: GGUF metadata lacks {arch}.{key}")
        return value

    n_heads = int(get("attention.head_count"))
    hidden = int(get("embedding_length"))
    head_dim = int(get("attention.key_length", hidden // n_heads))
    if int(get("attention.value_length", head_dim)) != head_dim:
        raise ModelLoadError(f"{path}: attention value length differs from key length (not supported)")
    if int(get("rope.dimension_count", head_dim)) != head_dim:
        raise ModelLoadError(f"{path}: partial rotary embeddings are not supported")
    window = fields.get(f"{arch}.attention.sliding_window")
    return LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=int(get("feed_forward_length")),
        n_layers=int(get("block_count")),
        n_heads=n_heads,
        n_kv_heads=int(get("attention.head_count_kv", n_heads)),
        rope_theta=float(get("rope.freq_base", 10000.0)),
        rms_eps=float(get(FAMILIES[family_name].gguf_eps_key, 1e-5)),
        max_position=int(get("context_length", 4096)),
        tie_embeddings="output.weight" not in infos,
        head_dim=head_dim,
        family=family_name,
        rope_scaling=_rope_scaling(fields, arch, infos, path),
        sliding_window=int(window) if window else None,
    )


def _rope_scaling(fields: dict, arch: str, infos: dict, path: Path) -> RopeScaling | None:
    kind = fields.get(f"{arch}.rope.scaling.type", "none")
    factor = float(fields.get(f"{arch}.rope.scaling.factor", 1.0))
    if _ROPE_FREQS in infos:  # llama3: the converter stores 1 / scale per frequency
        if kind not in ("none", "linear") or factor != 1.0:
            raise ModelLoadError(f"{path}: rope_freqs together with rope scaling {kind!r} is not supported")
        divisors = _read_tensor(path, infos[_ROPE_FREQS])
        return RopeScaling("llama3", freq_divisors=tuple(divisors.tolist()))
    if kind == "none" or (kind == "linear" and factor == 1.0):
        return None
    if kind == "linear":
        return RopeScaling("linear", factor=factor)
    if kind == "yarn":
        if fields.get(f"{arch}.rope.scaling.attn_factor") is not None:
            raise ModelLoadError(f"{path}: yarn with an explicit attention factor is not supported")
        original = fields.get(f"{arch}.rope.scaling.original_context_length")
        if original is None:
            raise ModelLoadError(f"{path}: yarn rope scaling without rope.scaling.original_context_length")
        return RopeScaling("yarn", factor=factor, original_max_position=int(original))
    raise ModelLoadError(f"{path}: rope scaling {kind!r} is not supported (linear, yarn, llama3)")


def _check_types(path: Path, tensors: list[TensorInfo]) -> None:
    """Dequantize one row of each quantization type now, so that a type gguf-py cannot read
    fails before the model is half loaded."""
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize, quant_shape_to_byte_shape

    first = {t.ggml_type: t for t in reversed(tensors)}
    for ggml_type, t in first.items():
        qtype = GGMLQuantizationType(ggml_type)
        if qtype in (GGMLQuantizationType.F32, GGMLQuantizationType.F16):
            continue
        row_bytes = quant_shape_to_byte_shape(t.shape, qtype)[-1]
        try:
            dequantize(np.fromfile(path, dtype=np.uint8, count=row_bytes, offset=t.offset)[None], qtype)
        except (ValueError, NotImplementedError) as exc:
            raise ModelLoadError(f"{path}: tensor type {qtype.name} is not supported ({exc})") from exc


def _read_tensor(path: Path, info: TensorInfo) -> torch.Tensor:
    """One tensor as float32 (float16 stays float16: the backend casts it once)."""
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize, quant_shape_to_byte_shape

    qtype = GGMLQuantizationType(info.ggml_type)
    plain = {GGMLQuantizationType.F32: np.float32, GGMLQuantizationType.F16: np.float16}
    if qtype in plain:
        raw = np.fromfile(path, dtype=plain[qtype], count=int(np.prod(info.shape)), offset=info.offset)
        return torch.from_numpy(raw.reshape(info.shape))
    row_bytes = quant_shape_to_byte_shape(info.shape, qtype)[-1]
    rows = np.fromfile(path, dtype=np.uint8, count=info.nbytes, offset=info.offset).reshape(-1, row_bytes)
    out = torch.empty(info.shape, dtype=torch.float32)
    flat = out.view(rows.shape[0], -1)
    step = max(1, _CHUNK_ELEMENTS // flat.shape[1])
    try:
        for r in range(0, rows.shape[0], step):
            flat[r:r + step] = torch.from_numpy(dequantize(rows[r:r + step], qtype))
    except (ValueError, NotImplementedError) as exc:
        raise ModelLoadError(f"{path}: cannot read tensor {info.name} ({exc})") from exc
    return out


def _unpermute_rotary(w: torch.Tensor, n_heads: int) -> torch.Tensor:
    """llama.cpp's converter permutes Q/K rows for its pairwise rotary; undo it (HF layout)."""
    return w.reshape(n_heads, w.shape[0] // n_heads // 2, 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape)
