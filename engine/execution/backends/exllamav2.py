"""ExLlamaV2 on an NVIDIA GPU: EXL2-quantized or fp16/bf16 Hugging Face model folders.

Importing `exllamav2` is only safe on a CUDA machine: on CPU-only torch it fails after printing
to stdout, and with CUDA torch but no GPU it may spend many minutes compiling its extension.
So this module imports it lazily, after `unavailable_reason()` has found nothing missing.
"""
from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Iterator, Sequence
from pathlib import Path

import torch

from engine.execution.backends.base import Backend, Capabilities
from engine.execution.pass_logits import TensorPasses
from engine.errors import BackendUnavailable, EngineError, ModelLoadError
from engine.stdout_guard import stdout_to_stderr
from engine.tokenization.hf import load_folder
from engine.tokenization.tokenizer import Tokenizer

INSTALL_HINT = "pip install 'draftline[exllamav2]'"


def unavailable_reason(cuda_build: str | None, cuda_device: bool, installed: bool) -> str | None:
    """What stops ExLlamaV2 from running here (one line), or None if nothing does."""
    if cuda_build is None:
        return (f"backend exllamav2 needs an NVIDIA GPU, but this torch ({torch.__version__}) is a "
                f"CPU-only build: use --backend torch, or install a CUDA build of torch and {INSTALL_HINT}")
    if not cuda_device:
        return (f"backend exllamav2 needs an NVIDIA GPU, but torch {torch.__version__} sees no CUDA "
                "device: use --backend torch")
    if not installed:
        return f"backend exllamav2 is not installed: {INSTALL_HINT}"
    return None


def require_exllamav2() -> None:
    """Fail fast, before anything is imported or loaded, with one line naming what is missing."""
    reason = unavailable_reason(torch.version.cuda, torch.cuda.is_available(),
                                importlib.util.find_spec("exllamav2") is not None)
    if reason:
        raise BackendUnavailable(reason)


@contextlib.contextmanager
def keep_torch_threads() -> Iterator[None]:
    """exllamav2 calls torch.set_num_threads(1) for the whole process; undo that on the way out."""
    threads = torch.get_num_threads()
    try:
        yield
    finally:
        torch.set_num_threads(threads)


class ExLlamaV2Backend(TensorPasses, Backend):
    """A loaded ExLlamaV2 model and its cache; `tokens` mirrors `cache.current_seq_len`."""

    def __init__(self, model, cache, vocab_size: int, max_len: int):
        super().__init__()
        self.model = model
        self.cache = cache
        self.vocab_size = vocab_size
        self.max_len = max_len
        # A pass its buffers take at once (config.max_input_len tokens, attention scores within
        # config.max_attention_size, as `forward` splits them) goes straight to `forward_chunk`,
        # past `forward`'s chunking loop: every verification pass does.
        self.chunk, self.attention_size = model.config.max_input_len, model.config.max_attention_size

    @property
    def capabilities(self) -> Capabilities:
        """Chains only (model.forward has no tree mask: decoding verifies one branch), on the GPU,
        in its own kernels and threads."""
        return Capabilities(tree=False, device="cuda")

    @torch.inference_mode()
    def _pass(self, tokens: Sequence[int], parents: Sequence[int] | None, logits: bool) -> torch.Tensor | None:
        n = len(tokens)
        if n == 0:
            raise ValueError("forward needs at least one token")
        if parents is not None and list(parents) != list(range(-1, n - 1)):
            raise EngineError("the exllamav2 backend cannot verify a token tree (capabilities.tree is False)")
        if self.length + n > self.max_len:
            raise EngineError(f"context full: {self.length + n} tokens > cache of {self.max_len}")
        ids = torch.tensor([list(tokens)], dtype=torch.long)
        if n <= self.chunk and (self.length + n) * n <= self.attention_size:
            out = self.model.forward_chunk(ids, self.cache, preprocess_only=not logits).get("logits")
        else:
            out = self.model.forward(ids, self.cache, preprocess_only=not logits)
        self.tokens.extend(tokens)
        if not logits:
            return None
        # fp16 logits, possibly with padded head columns (set to -65504) past the real vocabulary:
        # a view, left in fp16 (verification's argmax is the same; `forward` and sampling convert).
        return out[0, :, :self.vocab_size]

    def truncate(self, n: int) -> None:
        del self.tokens[n:]
        self.cache.current_seq_len = len(self.tokens)


def load_exllamav2(path: Path, max_len: int = 4096) -> tuple[ExLlamaV2Backend, Tokenizer]:
    """Load a Hugging Face or EXL2 model folder on the GPU, with the project's tokenizer
    (read from the folder's tokenizer.json, so token ids match the other backends)."""
    require_exllamav2()
    path = Path(path)
    if not (path.is_dir() and (path / "config.json").exists()):
        raise ModelLoadError(f"{path}: the exllamav2 backend needs a model folder with config.json "
                             "(EXL2 or fp16 safetensors), not a .gguf file")
    tokenizer = load_folder(path)
    with stdout_to_stderr(), keep_torch_threads():
        try:
            from exllamav2 import ExLlamaV2, ExLlamaV2Cache, ExLlamaV2Config
        except (ImportError, OSError, RuntimeError) as exc:
            raise BackendUnavailable(f"exllamav2 failed to import or build its extension: {exc}") from exc
        config = ExLlamaV2Config(str(path))
        max_len = min(max_len, config.max_seq_len)
        config.max_seq_len = max_len
        # 0.3.2's torch-SDPA attention drops the causal mask inside a multi-token forward, which
        # silently breaks prefill and draft verification. flash-attn or xformers, when installed
        # and usable, take precedence over this setting; otherwise the (correct) matmul path runs.
        config.no_sdpa = True
        model = ExLlamaV2(config)
        cache = ExLlamaV2Cache(model, max_seq_len=max_len, lazy=True)
        model.load_autosplit(cache)
    return ExLlamaV2Backend(model, cache, config.vocab_size, max_len), tokenizer
