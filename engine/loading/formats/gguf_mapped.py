"""A GGUF file where the native decoder runs it: its header's hyper-parameters, and its
matrices in their own blocks where the file is mapped (engine/loading/formats/gguf_blocks.py): nothing
is converted, and the weights' memory is the file's pages, shared with the page cache.

numpy only: a model the native decoder runs starts without importing torch (1.2-1.5 s of a
start). The torch kernels read a GGUF through engine/loading/formats/gguf.py.
"""
from __future__ import annotations

import mmap
from pathlib import Path

import numpy as np

from engine.loading.architectures import FAMILIES, GGUF_ARCHITECTURES
from engine.errors import ModelLoadError
from engine.loading.formats.gguf_blocks import NATIVE_TYPES, BlockMatrix
from engine.loading.formats.gguf_header import Header, TensorInfo, read_header
from engine.execution.rope import RopeScaling
from engine.loading.weights import LlamaConfig, LoadedWeights, plan_tensors

ROPE_FREQS = "rope_freqs.weight"  # llama3 rope scaling: per-frequency divisors
_FLOATS = {0: np.float32, 1: np.float16}  # ggml F32, F16 (BF16 below)
_BF16 = 30


def read_vector(path: Path, info: TensorInfo) -> np.ndarray:
    """A float tensor (norms, biases, rope divisors: F32 in every converter's output; F16 and BF16
    read too) as float32."""
    count = int(np.prod(info.shape))
    if info.ggml_type in _FLOATS:
        raw = np.fromfile(path, dtype=_FLOATS[info.ggml_type], count=count, offset=info.offset)
    elif info.ggml_type == _BF16:
        raw = (np.fromfile(path, dtype=np.uint16, count=count, offset=info.offset).astype(np.uint32) << 16).view(np.float32)
    else:
        raise ModelLoadError(f"{path}: vector {info.name} is stored quantized (type {info.ggml_type}): not read")
    return raw.astype(np.float32).reshape(info.shape)


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
    config = header_config(header, path)
    plan = plan_tensors(config, "gguf", {name: t.shape for name, t in header.tensors.items()},
                        lambda name: name == ROPE_FREQS, path)
    with open(path, "rb") as f:
        mapped = mmap.mmap(f.fileno(), 0, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
    # Every pass reads all but an untied embedding, which only gives the rows looked up.
    _populate(mapped, [header.tensors[name] for canonical, name in plan.items()
                       if canonical != "embed" or config.tie_embeddings])
    raw = np.frombuffer(mapped, dtype=np.uint8)
    tensors: dict[str, BlockMatrix | np.ndarray] = {}
    for canonical, name in plan.items():
        info = header.tensors[name]
        if len(info.shape) == 2:
            rows = raw[info.offset:info.offset + info.nbytes].reshape(info.shape[0], -1)
            tensors[canonical] = BlockMatrix(info.ggml_type, rows, info.shape[1])
        else:
            tensors[canonical] = read_vector(path, info)
    return LoadedWeights(config, tensors, path, rotary_pairs=FAMILIES[config.family].gguf_permuted_qk)


def runs_mapped(path: Path) -> bool:
    """Whether the native decoder computes this file where it is mapped: a family and shapes
    it computes, every matrix in a type it reads, and a decoder built for this machine."""
    from engine.execution import native

    try:
        header = read_header(path)
        config = header_config(header, path)
        plan = plan_tensors(config, "gguf", {name: t.shape for name, t in header.tensors.items()},
                            lambda name: name == ROPE_FREQS, path)
    except ModelLoadError:
        return False  # loading it will say what is wrong
    infos = [header.tensors[name] for name in plan.values()]
    if not native.computes(config, set(plan)) or any(
            len(t.shape) == 2 and (t.ggml_type not in NATIVE_TYPES or t.shape[1] % 32) for t in infos):
        return False
    return native.load_library() is not None



def header_config(header: Header, path: Path) -> LlamaConfig:
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
    if ROPE_FREQS in infos:  # llama3: the converter stores 1 / scale per frequency
        if kind not in ("none", "linear") or factor != 1.0:
            raise ModelLoadError(f"{path}: rope_freqs together with rope scaling {kind!r} is not supported")
        divisors = read_vector(path, infos[ROPE_FREQS])
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
