"""Which models to load (names, paths: engine/loading/fetch.py), in which dtype, on which backend."""
from __future__ import annotations

import importlib.util
import logging
from pathlib import Path

from engine.api import BACKENDS, DTYPES
from engine.execution.devices import cuda_available
from engine.execution.backends.base import Backend
from engine.errors import BackendUnavailable, ModelLoadError
from engine.loading.fetch import model_path
from engine.tokenization import load_tokenizer
from engine.tokenization.tokenizer import Tokenizer

log = logging.getLogger("draftline")


def torch_dtype(dtype: str):
    """The torch dtype a weights format computes in: int8 and int4 are weight-only quantized
    matrices with bf16 activations (CPU; engine/execution/kernels.py); gguf, a GGUF file's own blocks
    where it is mapped (the native decoder), keeps its KV cache in bf16."""
    import torch

    return {"fp16": torch.float16, "fp32": torch.float32}.get(dtype, torch.bfloat16)


def resolve(spec: str | Path) -> Path:
    """The local file or folder of a model: a path, a known name or hf:OWNER/REPO/FILE.gguf
    (engine/loading/fetch.py; fetched on first use)."""
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
        import torch

        return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    if path is not None and path.suffix == ".gguf" and path.is_file():
        from engine.loading.formats.gguf_mapped import runs_mapped

        try:
            if runs_mapped(path):
                return "gguf"
            from engine.loading.formats.gguf import stored_in_4_bits

            return "int4" if stored_in_4_bits(path) else "int8"
        except ModelLoadError:
            return "int8"  # loading it will say what is wrong
    return "int8"


def resolve_dtype(dtype: str | None, model: str | Path | None = None) -> str:
    """The one place a missing dtype becomes a concrete one, for every command."""
    if dtype is not None and dtype not in DTYPES:
        raise ModelLoadError(f"unknown dtype {dtype!r} (choose from {', '.join(DTYPES)})")
    if dtype is not None:
        return dtype
    return default_dtype("cuda" if cuda_available() else "cpu", None if model is None else resolve(model))


def _runs_mapped(path: Path) -> bool:
    from engine.loading.formats.gguf_mapped import runs_mapped

    return path.suffix == ".gguf" and path.is_file() and runs_mapped(path)


def choose_backend(requested: str, path: Path) -> str:
    """auto: ExLlamaV2 for a model folder on a CUDA machine where it is installed, else torch."""
    if requested not in BACKENDS:
        raise BackendUnavailable(f"unknown backend {requested!r} (choose from {', '.join(BACKENDS)})")
    if requested == "exllamav2":
        from engine.execution.backends.exllamav2 import require_exllamav2  # does not import exllamav2

        require_exllamav2()  # fail fast on a CPU machine, before any weights are read
    if requested != "auto":
        return requested
    if path.is_dir() and cuda_available() and importlib.util.find_spec("exllamav2"):
        return "exllamav2"
    return "torch"


def load_model(spec: str | Path, dtype: str | None = None, backend: str = "auto",
               max_len: int = 4096, copy_budget: float = 0.25) -> tuple[Backend, Tokenizer]:
    """Load a model (a path, a known name or hf:...) on the chosen backend, with its tokenizer.
    copy_budget: the torch backend's (TorchLlama)."""
    path = resolve(spec)
    if not path.exists():
        raise ModelLoadError(f"model not found: {path}")
    kind = choose_backend(backend, path)
    if kind == "exllamav2":
        from engine.execution.backends.exllamav2 import load_exllamav2  # lazy: CUDA machines only

        return load_exllamav2(path, max_len=max_len)
    device = "cuda" if cuda_available() else "cpu"
    dtype = resolve_dtype(dtype, path)
    tokenizer = load_tokenizer(path)  # first: an unsupported vocabulary fails before any tensor is read
    if dtype == "gguf" and (device != "cpu" or not _runs_mapped(path)):
        dtype = default_dtype(device, path)
        log.info("%s: the native decoder cannot compute it in place; using %s", path.name, dtype)
    if dtype == "gguf":  # the file's own blocks, where it is mapped: nothing to convert or keep, no torch
        from engine.execution.backends.native_llama import NativeLlama
        from engine.loading.formats.gguf_mapped import map_gguf

        weights = map_gguf(path)
        model = NativeLlama(weights, max_len=max_len)
    else:
        model = _load_torch(path, dtype, device, max_len, copy_budget)
    log.info("loaded %s (%d layers, %s, %s)", path.name, model.config.n_layers, dtype, device)
    # Rows that pad the embedding past the real tokens are never chosen.
    model.limit_vocab(min(tokenizer.vocab_size, tokenizer.tokens_in_use))
    return model, tokenizer


def _load_torch(path: Path, dtype: str, device: str, max_len: int, copy_budget: float) -> Backend:
    from engine.loading import weight_cache
    from engine.execution.backends.torch_llama import TorchLlama
    from engine.execution.kernels import QUANT
    from engine.loading.formats.load import load_weights

    quant = dtype if dtype in QUANT else None
    weights = weight_cache.load(path, dtype)
    if weights is None:  # first start with this file: convert, and keep the result
        weights = weight_cache.convert(load_weights(path, four_bit=quant == "int4"), torch_dtype(dtype), quant)
        weight_cache.save(weights, path, dtype)
    return TorchLlama(weights, torch_dtype(dtype), max_len=max_len, device=device, quant=quant,
                      copy_budget=copy_budget)
