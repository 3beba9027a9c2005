"""Read decoder weights from GGUF files or Hugging Face safetensors folders.

Only formats that cannot execute code are accepted: GGUF and safetensors, never pickle.
Loading checks the architecture, hyper-parameters and every tensor's name and shape from the
file's header first; the tensors themselves are read later, one at a time, when a backend
asks for them (`LoadedWeights.tensors` is lazy), so no float32 copy of the whole model exists.
"""
from __future__ import annotations

from pathlib import Path

from engine.errors import ModelLoadError
from engine.loading.formats.gguf import open_gguf
from engine.loading.formats.hf import open_hf_folder
from engine.loading.weights import LoadedWeights


def load_weights(path: Path, four_bit: bool = False) -> LoadedWeights:
    """Open a `.gguf` file or a Hugging Face folder; raise ModelLoadError with a clear reason.

    Only the header is read here; tensors are read when looked up in the result. With
    `four_bit`, a GGUF's 4-bit matrices are read as they are stored (Int4Weight) and its other
    quantized ones as int8 (engine/loading/formats/gguf.py); float ones stay float."""
    path = Path(path)
    if not path.exists():
        raise ModelLoadError(f"model not found: {path}")
    if path.is_dir():
        return open_hf_folder(path)
    if path.suffix == ".gguf":
        return open_gguf(path, four_bit)
    raise ModelLoadError(
        f"unsupported model file {path.name}: give a .gguf file or a folder with config.json "
        "and *.safetensors (pickled .bin/.pt checkpoints are refused)"
    )
