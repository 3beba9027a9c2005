"""A draft model pairs with a target by tokenizer, not by embedding rows; padding rows past
the tokenizer's vocabulary are never chosen."""
import numpy as np
import pytest
import torch
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import models

from engine.api import Request
from engine.drafters import draft_model
from engine.engine import Engine, pair_draft
from engine.errors import EngineError
from engine.models import load_model
from engine.tokenization.tokenizer import Tokenizer
from tests.code_samples import stdlib_text
from tests.models import SMALL
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


@pytest.mark.integration  # the embedded model three times
def test_a_draft_proposes_frequent_tokens_and_those_it_has_read_and_stays_exact(monkeypatch):
    """The embedded model's own blocks drafting for itself, its head cut to the first ids and
    the tokens of its context: kept rows score as the full head scores them, the others are
    never proposed, and every mode still gives the autoregressive tokens."""
    monkeypatch.setattr(draft_model, "SHORTLIST", 4096)
    target, tok = load_model(SMALL, "gguf")
    full, _ = load_model(SMALL, "gguf")
    draft, _ = load_model(SMALL, "gguf")
    pair = pair_draft(target, tok, draft, tok)
    np.testing.assert_array_equal(draft.head_rows, np.arange(4096))
    prompt = tok.encode(stdlib_text("textwrap.py"))[:300]
    rare = sorted({t for t in prompt if t >= 4096})
    assert rare
    pair.prefill(prompt)
    np.testing.assert_array_equal(draft.head_rows, np.union1d(np.arange(4096), rare))
    want = full.forward(prompt[-8:])
    draft.truncate(0)
    got = draft.forward(prompt[-8:])
    kept = draft.head_rows
    np.testing.assert_allclose(got[:, kept], want[:, kept], rtol=1e-6, atol=1e-6)
    assert np.isneginf(np.delete(got, kept, axis=1)).all()
    engine = Engine(target, tok, pair, pass_cost=[0.0] + [1.0] * 30, draft_cost=0.01)
    for cut in (120, 200, 280):
        ar = engine.complete(prompt[:cut], Request(max_new_tokens=16), "ar").tokens
        for mode in ("draft", "hybrid"):
            got = engine.complete(prompt[:cut], Request(max_new_tokens=16), mode)
            assert got.tokens == ar, (cut, mode)
            assert got.stats.model_tested > 0
