"""Which models to load (names, paths: engine/fetch.py), in which dtype, on which backend."""
from __future__ import annotations

import importlib.util
import logging
from pathlib import Path

import torch

from engine.api import BACKENDS
from engine.backends.base import Backend
from engine.errors import BackendUnavailable, ModelLoadError
from engine.fetch import model_path
from engine.kernels import QUANT
from engine import weight_cache
from engine.tokenization import load_tokenizer
from engine.tokenization.tokenizer import Tokenizer
from engine.weights import load_weights

log = logging.getLogger("draftline")

# int8, int4: weight-only quantized matrices with bf16 activations (CPU; engine/kernels.py).
# gguf: a GGUF file's own blocks where it is mapped, computed by the native decoder.
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32, "int8": torch.bfloat16,
          "int4": torch.bfloat16, "gguf": torch.bfloat16}


def resolve(spec: str | Path) -> Path:
    """The local file or folder of a model: a path, a known name or hf:OWNER/REPO/FILE.gguf
    (engine/fetch.py; fetched on first use)."""
    return model_path(str(spec))


def default_dtype(device: str = "cpu", path: Path | None = None) -> str:
    """The fastest dtype measured for the device (docs/bench.md, docs/native.md).

    On a CPU: a GGUF file the native decoder computes is read where it is mapped and computed
    in its own blocks (gguf): nothing to convert at start-up, no memory beyond the file's
    pages, and one-token passes read the fewest bytes. Elsewhere (no C compiler, a CPU without
    AVX2, a family or tensor type it does not compute) a GGUF whose layers are stored in 4 bits
    (Q4_0, Q4_1, Q4_K) is computed in them (int4), and anything else is int8: one-token passes
    read half the bytes of bf16. Every kernel computes each row of a pass on its own, so lookup
    output matches plain greedy output."""
    if device == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    if path is not None and path.suffix == ".gguf" and path.is_file():
        from engine.formats.gguf import runs_mapped, stored_in_4_bits

        try:
            return "gguf" if runs_mapped(path) else "int4" if stored_in_4_bits(path) else "int8"
        except ModelLoadError:
            return "int8"  # loading it will say what is wrong
    return "int8"


def resolve_dtype(dtype: str | None, model: str | Path | None = None) -> str:
    """The one place a missing dtype becomes a concrete one, for every command."""
    if dtype is not None and dtype not in DTYPES:
        raise ModelLoadError(f"unknown dtype {dtype!r} (choose from {', '.join(DTYPES)})")
    if dtype is not None:
        return dtype
    return default_dtype("cuda" if torch.cuda.is_available() else "cpu",
                         None if model is None else resolve(model))


def _runs_mapped(path: Path) -> bool:
    from engine.formats.gguf import runs_mapped

    return path.suffix == ".gguf" and path.is_file() and runs_mapped(path)


def choose_backend(requested: str, path: Path) -> str:
    """auto: ExLlamaV2 for a model folder on a CUDA machine where it is installed, else torch."""
    if requested not in BACKENDS:
        raise BackendUnavailable(f"unknown backend {requested!r} (choose from {', '.join(BACKENDS)})")
    if requested == "exllamav2":
        from engine.backends.exllamav2 import require_exllamav2  # does not import exllamav2

        require_exllamav2()  # fail fast on a CPU machine, before any weights are read
    if requested != "auto":
        return requested
    if torch.cuda.is_available() and path.is_dir() and importlib.util.find_spec("exllamav2"):
        return "exllamav2"
    return "torch"


def load_model(spec: str | Path, dtype: str | None = None, backend: str = "auto",
               max_len: int = 4096) -> tuple[Backend, Tokenizer]:
    """Load a model (a path, a known name or hf:...) on the chosen backend, with its tokenizer."""
    path = resolve(spec)
    if not path.exists():
        raise ModelLoadError(f"model not found: {path}")
    kind = choose_backend(backend, path)
    if kind == "exllamav2":
        from engine.backends.exllamav2 import load_exllamav2  # lazy: CUDA machines only

        return load_exllamav2(path, max_len=max_len)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = resolve_dtype(dtype, path)
    from engine.backends.torch_llama import TorchLlama

    tokenizer = load_tokenizer(path)  # first: an unsupported vocabulary fails before any tensor is read
    if dtype == "gguf" and (device != "cpu" or not _runs_mapped(path)):
        dtype = default_dtype(device, path)
        log.info("%s: the native decoder cannot compute it in place; using %s", path.name, dtype)
    quant = dtype if dtype in QUANT else None
    if dtype == "gguf":  # the file's own blocks, where it is mapped: nothing to convert or keep
        from engine.formats.gguf import map_gguf

        weights = map_gguf(path)
    else:
        weights = weight_cache.load(path, dtype)
    if weights is None:  # first start with this file: convert, and keep the result
        weights = weight_cache.convert(load_weights(path, four_bit=quant == "int4"), DTYPES[dtype], quant)
        weight_cache.save(weights, path, dtype)
    log.info("loaded %s (%d layers, %s, %s)", path.name, weights.config.n_layers, dtype, device)
    model = TorchLlama(weights, DTYPES[dtype], max_len=max_len, device=device, quant=quant)
    # Rows that pad the embedding past the real tokens are never chosen.
    model.limit_vocab(min(tokenizer.vocab_size, tokenizer.tokens_in_use))
    return model, tokenizer
