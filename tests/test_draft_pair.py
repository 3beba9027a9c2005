"""A draft model pairs with a target by tokenizer, not by embedding rows; padding rows past
the tokenizer's vocabulary are never chosen."""
import numpy as np
import pytest
import torch
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import models

from engine.api import Request
from engine.engine import Engine, pair_draft
from engine.errors import EngineError
from engine.tokenization.tokenizer import Tokenizer
from tests.tiny_models import random_llama

WORDS = ["a", "b", "c", "d", "e", "f"]


def tokenizer(words: list[str]) -> Tokenizer:
    return Tokenizer(HFTokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="a")), set())


def test_padding_rows_are_never_chosen():
    model = random_llama(seed=1, vocab=10)  # 10 rows for 6 tokens
    with torch.no_grad():
        model.head[6:] = 100 * model.head[6:].sign()  # the padding rows would win every argmax
    model.limit_vocab(len(WORDS))
    logits = model.forward([1, 2, 3])
    assert logits.shape == (3, 10)
    assert np.isinf(logits[:, 6:]).all() and int(logits[-1].argmax()) < 6


def test_draft_with_a_differently_padded_embedding_pairs():
    target, draft = random_llama(seed=1, vocab=12), random_llama(seed=2, vocab=8)
    target.limit_vocab(len(WORDS))
    pair = pair_draft(target, tokenizer(WORDS), draft, tokenizer(WORDS))
    logits = pair.backend.forward([1, 2])
    assert logits.shape == (2, 12)  # as wide as the target's, for rejection sampling
    assert np.isinf(logits[:, 6:]).all() and np.isfinite(logits[:, :6]).all()


def test_draft_with_another_tokenizer_is_refused():
    target, draft = random_llama(seed=1, vocab=8), random_llama(seed=2, vocab=8)
    with pytest.raises(EngineError, match="tokenizer differs from the target's .id 3"):
        pair_draft(target, tokenizer(WORDS), draft, tokenizer(["a", "b", "c", "x", "e", "f"]))


def test_every_mode_with_a_draft_model_equals_plain_decoding():
    """A pair in fp32 (tiny random models): lookup, draft and hybrid give the autoregressive
    tokens; a draft identical to the target agrees on its every first choice, another one less."""
    words = [f"w{i}" for i in range(16)]
    target = random_llama(seed=1, vocab=16)
    results = {}
    for name, draft in (("same", random_llama(seed=1, vocab=16)), ("other", random_llama(seed=2, vocab=16))):
        engine = Engine(target, tokenizer(words), pair_draft(target, tokenizer(words), draft, tokenizer(words)),
                        pass_cost=[0.0] + [1.0] * 30, draft_cost=0.01)  # cheap drafts: draft a lot
        agreed = tested = 0
        for seed in range(6):
            g = torch.Generator().manual_seed(seed)
            prompt = torch.randint(0, 16, (12,), generator=g).tolist() * 2
            ar = engine.complete(prompt, Request(max_new_tokens=20), "ar").tokens
            for mode in ("lookup", "draft", "hybrid"):
                got = engine.complete(prompt, Request(max_new_tokens=20), mode)
                assert got.tokens == ar, (name, mode, seed)
                agreed += got.stats.model_agreed
                tested += got.stats.model_tested
        results[name] = agreed / tested
    assert results["same"] == 1.0 and results["other"] < 0.9
