"""Exact tokenizers for the models people download: GGUF (byte-level BPE and SentencePiece,
full models or vocab-only files) and Hugging Face folders (tokenizer.json)."""
from __future__ import annotations

from pathlib import Path

from engine.errors import ModelLoadError
from engine.tokenization.gguf import load_gguf
from engine.tokenization.hf import load_folder
from engine.tokenization.tokenizer import Tokenizer


def load_tokenizer(path: str | Path) -> Tokenizer:
    """The tokenizer of a `.gguf` file (metadata only, no tensors) or a model folder."""
    path = Path(path).expanduser()
    if path.is_dir():
        return load_folder(path)
    if not path.is_file():
        raise ModelLoadError(f"model not found: {path}")
    return load_gguf(path)
