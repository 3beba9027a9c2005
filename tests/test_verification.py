"""Verification reads token ids (greedy), or the drafted tokens' probabilities and one drawn id
(sampling), from where the target's logits are: whole rows never cross to the host."""
from dataclasses import replace

import numpy as np
import pytest
import torch

from engine.api import Request, Sampling
from engine.drafters.base import Draft
from engine.engine import Engine
from engine.execution.backends.base import Capabilities
from engine.execution.backends.torch_llama import TorchLlama
from engine.execution.pass_logits import PassLogits
from engine.verification import verify
from tests.tiny_models import random_llama, random_weights

PROMPT = [17, 230, 5, 991, 42, 17, 230, 5, 991, 42, 17, 230, 5]  # repeats: lookup drafts from it


@pytest.fixture
def counted(small_tokenizer, monkeypatch):
    """An engine on a random model with the embedded model's vocabulary (49k rows a position),
    and the widths of its target's verification passes."""
    engine = Engine(random_llama(3, vocab=small_tokenizer.vocab_size), small_tokenizer)
    widths: list[int] = []
    score = engine.target.score

    def counting(tokens, *args, **kwargs):
        widths.append(len(tokens))
        return score(tokens, *args, **kwargs)

    monkeypatch.setattr(engine.target, "score", counting)
    return engine, widths


@pytest.mark.parametrize("mode", ["ar", "lookup"])
def test_greedy_verification_copies_one_id_a_position(counted, mode):
    engine, widths = counted
    done = engine.complete(PROMPT, Request(max_new_tokens=24), mode)
    assert done.stats.target_passes == len(widths) > 0
    assert done.stats.logits_to_host == sum(widths)  # one id a position, of 49k logits each
    if mode == "lookup":
        assert max(widths) > 1  # drafts were verified, several positions a pass


def test_sampled_verification_copies_the_drafted_tokens_probabilities_and_one_id(counted):
    engine, widths = counted
    done = engine.complete(PROMPT, Request(max_new_tokens=24, sampling=Sampling(temperature=0.9, seed=1)),
                           "lookup")
    assert max(widths) > 1
    # a pass of w positions verifies w - 1 drafted tokens: their probabilities, at most one
    # residual's total and the drawn id cross
    assert done.stats.logits_to_host <= sum(w + 1 for w in widths)


def test_the_same_verdict_from_a_host_array_and_a_tensor():
    rows = np.random.default_rng(0).normal(size=(4, 1000)).astype(np.float32)
    best = rows.argmax(-1).tolist()
    draft = Draft.chain([best[0], best[1], (best[2] + 1) % 1000])  # the third token is wrong
    for logits in (PassLogits(rows), PassLogits(torch.from_numpy(rows.copy()))):
        assert verify(draft, logits, Sampling(), np.random.default_rng(0)) == ([0, 1], best[2])
        assert logits.crossed == 4
    sampled = [verify(draft, PassLogits(r), Sampling(temperature=1.0, seed=0), np.random.default_rng(5))
               for r in (rows, torch.from_numpy(rows.copy()))]
    assert sampled[0] == sampled[1]


class ChainsOnly(TorchLlama):
    """A target that, like ExLlamaV2's, verifies one branch a pass."""

    @property
    def capabilities(self) -> Capabilities:
        return replace(super().capabilities, tree=False)


def test_a_target_that_verifies_chains_gets_the_best_chain_and_writes_the_same(small_tokenizer, monkeypatch):
    engine = Engine(ChainsOnly(random_weights(3, vocab=small_tokenizer.vocab_size), dtype=torch.float32,
                               max_len=256), small_tokenizer)
    expected = engine.complete(PROMPT, Request(max_new_tokens=24), "ar").tokens
    passes: list[tuple[int, object]] = []
    score = engine.target.score

    def recording(tokens, parents=None):
        passes.append((len(tokens), parents))
        return score(tokens, parents)

    monkeypatch.setattr(engine.target, "score", recording)
    assert engine.complete(PROMPT, Request(max_new_tokens=24), "lookup").tokens == expected
    assert all(parents is None for _, parents in passes)  # every pass a plain causal chain
    assert max(width for width, _ in passes) > 1
