"""Seeded random Llama models with a tiny vocabulary, for tests that need many fast passes."""
import torch

from engine.execution.backends.torch_llama import TorchLlama
from engine.drafters.feature_draft import FeatureDraft
from engine.loading.weights import LlamaConfig, LoadedWeights


def random_weights(seed: int, vocab: int = 8, hidden: int = 32, layers: int = 2, scale: float = 0.4) -> LoadedWeights:
    config = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden,
                         n_layers=layers, n_heads=4, n_kv_heads=2, rope_theta=10000.0,
                         rms_eps=1e-5, max_position=256, tie_embeddings=False)
    g = torch.Generator().manual_seed(seed)
    hd = hidden // 4
    shapes = {"embed": (vocab, hidden), "lm_head": (vocab, hidden), "norm": (hidden,)}
    for i in range(layers):
        shapes |= {f"layers.{i}.attn_norm": (hidden,), f"layers.{i}.ffn_norm": (hidden,),
                   f"layers.{i}.wq": (hidden, hidden), f"layers.{i}.wk": (2 * hd, hidden),
                   f"layers.{i}.wv": (2 * hd, hidden), f"layers.{i}.wo": (hidden, hidden),
                   f"layers.{i}.w_gate": (2 * hidden, hidden), f"layers.{i}.w_up": (2 * hidden, hidden),
                   f"layers.{i}.w_down": (hidden, 2 * hidden)}
    tensors = {name: (torch.ones(shape) if len(shape) == 1 else torch.randn(shape, generator=g) * scale)
               for name, shape in shapes.items()}
    return LoadedWeights(config, tensors, source=None)


def random_llama(seed: int, **sizes) -> TorchLlama:
    return TorchLlama(random_weights(seed, **sizes), dtype=torch.float32, max_len=256)


def random_feature_draft(target: TorchLlama, seed: int) -> FeatureDraft:
    """A one-layer feature-conditioned draft with random weights on top of `target`."""
    weights = random_weights(seed, vocab=target.vocab_size, hidden=target.config.hidden_size, layers=1)
    g = torch.Generator().manual_seed(seed)
    hidden = target.config.hidden_size
    fc = torch.randn(hidden, 2 * hidden, generator=g) * 0.2
    net = TorchLlama(weights, dtype=torch.float32, max_len=target.max_len)
    return FeatureDraft(target, net, fc, torch.zeros(hidden))
