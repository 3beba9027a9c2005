"""Tiny randomly initialised transformers models of each family, saved as checkpoints are
downloaded (safetensors, config.json with `rope_theta`/`rope_scaling`, a tokenizer.json)."""
import json
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

VOCAB = 320  # embedding rows; the tokenizer has fewer, as padded checkpoints do
TOKENS = 300
HIDDEN = 256  # K-quants need rows that are whole 256-weight blocks
SIZES = dict(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=512, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
FAMILIES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", dict(rms_norm_eps=1e-5, rope_theta=10000.0,
                                                      tie_word_embeddings=False)),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", dict(rms_norm_eps=1e-6, rope_theta=1000000.0,
                                                      tie_word_embeddings=True)),
    # head_dim 128 with 4 heads: wider than hidden_size / heads, as in Qwen3
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", dict(rms_norm_eps=1e-6, rope_theta=1000000.0, head_dim=128,
                                                      tie_word_embeddings=False)),
    "starcoder2": ("Starcoder2Config", "Starcoder2ForCausalLM", dict(norm_epsilon=1e-5, rope_theta=100000.0,
                                                                    tie_word_embeddings=True)),
}


def write_tokenizer(folder: Path) -> None:
    """A byte-level BPE trained on a little code, as the converter wants one in the folder."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=TOKENS, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator([Path(__file__).read_text()] * 4, trainer)
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|endoftext|>"}))


def build(family: str, folder: Path, seed: int = 0, rope_scaling: dict | None = None, **overrides):
    """Save a tiny `family` model in `folder`; return it as transformers loads it from there."""
    import transformers

    config_class, model_class, extra = FAMILIES[family]
    settings = SIZES | extra | overrides
    if rope_scaling:
        settings["rope_scaling"] = rope_scaling
    config = getattr(transformers, config_class)(**settings)
    torch.manual_seed(seed)
    model = getattr(transformers, model_class)(config)
    with torch.no_grad():  # weights large enough that logits spread (the default init is tiny)
        for name, p in model.named_parameters():
            if p.dim() == 2:
                p.copy_(torch.randn_like(p) * (1.0 if "embed" in name else p.shape[1] ** -0.5))
            elif "norm" in name and name.endswith("weight"):
                p.copy_(1 + 0.2 * torch.randn_like(p))
            else:
                p.copy_(0.2 * torch.randn_like(p))
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder, safe_serialization=True)
    _as_downloaded(folder / "config.json", settings)
    write_tokenizer(folder)
    return getattr(transformers, model_class).from_pretrained(folder, torch_dtype=torch.float32).eval()


def _as_downloaded(config_file: Path, settings: dict) -> None:
    """Write the rope settings the way published config.json files (and llama.cpp's converter)
    have them: `rope_theta` and `rope_scaling`, not transformers 5's `rope_parameters`."""
    raw = json.loads(config_file.read_text())
    raw.pop("rope_parameters", None)
    raw["rope_theta"] = settings["rope_theta"]
    if "rope_scaling" in settings:
        raw["rope_scaling"] = settings["rope_scaling"]
        if "original_max_position_embeddings" in settings["rope_scaling"]:
            # llama.cpp's llama3 conversion reads the top-level key (default 8192)
            raw["original_max_position_embeddings"] = settings["rope_scaling"]["original_max_position_embeddings"]
    config_file.write_text(json.dumps(raw, indent=1))


def logits(model, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].float()
