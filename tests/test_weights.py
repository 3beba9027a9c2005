"""Hugging Face folders load (safetensors only), and bad model files give clear errors."""
import json

import pytest
import torch
from safetensors.torch import save_file

from engine.execution.backends.torch_llama import TorchLlama
from engine.errors import ModelLoadError
from engine.loading.architectures import FAMILIES
from engine.loading.formats.load import load_weights
from engine.loading.weights import LoadedWeights
from tests.tiny_models import random_weights


def write_hf_folder(weights: LoadedWeights, folder) -> None:
    c = weights.config
    (folder / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "vocab_size": c.vocab_size,
        "hidden_size": c.hidden_size, "intermediate_size": c.intermediate_size,
        "num_hidden_layers": c.n_layers, "num_attention_heads": c.n_heads,
        "num_key_value_heads": c.n_kv_heads, "rope_theta": c.rope_theta,
        "rms_norm_eps": c.rms_eps, "max_position_embeddings": c.max_position,
        "tie_word_embeddings": False}))
    named = {}
    for canonical, tensor in weights.tensors.items():
        template = canonical.replace(canonical.split(".")[1], "{i}") if canonical.startswith("layers.") else canonical
        i = canonical.split(".")[1] if canonical.startswith("layers.") else None
        named[FAMILIES["llama"].names("hf")[template].format(i=i)] = tensor.contiguous()
    save_file(named, str(folder / "model.safetensors"))


def test_hf_folder_loads_to_the_same_model(tmp_path):
    weights = random_weights(seed=3)
    model = TorchLlama(weights, dtype=torch.float32, max_len=256)
    write_hf_folder(weights, tmp_path)
    loaded = TorchLlama(load_weights(tmp_path), dtype=torch.float32, max_len=256)
    prompt = [1, 2, 3, 4, 5, 6]
    torch.testing.assert_close(loaded.forward(prompt), model.forward(prompt))


def test_missing_model(tmp_path):
    with pytest.raises(ModelLoadError, match="not found"):
        load_weights(tmp_path / "nope.gguf")


def test_corrupt_gguf(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\x00" * 64)
    with pytest.raises(ModelLoadError, match="not a valid GGUF"):
        load_weights(bad)


def test_pickled_checkpoints_are_refused(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "pytorch_model.bin").write_bytes(b"\x80\x04")
    with pytest.raises(ModelLoadError, match="pickled checkpoints are refused"):
        load_weights(tmp_path)
    with pytest.raises(ModelLoadError, match="unsupported model file"):
        load_weights(tmp_path / "pytorch_model.bin")


def test_unsupported_architecture(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["GPT2LMHeadModel"]}))
    save_file({"x": torch.zeros(1)}, str(tmp_path / "model.safetensors"))
    with pytest.raises(ModelLoadError, match="GPT2LMHeadModel is not supported"):
        load_weights(tmp_path)
