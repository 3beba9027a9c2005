"""Speculative sampling keeps the target's distribution (Leviathan et al. 2023, Theorem 1).

A tiny random target and a different tiny random draft model; the empirical distribution of the
first two sampled tokens is compared, by a chi-square test, with the exact distribution computed
from the target alone. A negative control shows the test can fail: the draft's own distribution
is rejected by the same test.
"""
import math

import numpy as np
import pytest
import torch

from engine.api import Request, Sampling
from engine.decoding import Vocabulary, generate_speculative
from engine.draft_length import Acceptance, PassCosts
from engine.drafters import draft_model
from engine.drafters.draft_model import DraftModel
from engine.drafters.hybrid import Hybrid
from engine.drafters.lookup import Lookup
from engine.sampling import probabilities as _probabilities
from tests.tiny_models import random_feature_draft, random_llama

pytestmark = pytest.mark.integration  # statistical tests: thousands of samples, minutes

PROMPT = [1, 5, 2, 7, 1, 5]
RUNS = 4000
SAMPLING = Sampling(temperature=1.0)
VOCABULARY = Vocabulary(eos_ids=frozenset(), decode=lambda ids: "", healer=None)  # tokens only


def probabilities(logits: np.ndarray, sampling: Sampling) -> np.ndarray:
    return _probabilities(torch.from_numpy(logits), sampling).numpy()


def chi_square_critical(df: int, z: float = 3.09) -> float:
    """Wilson-Hilferty approximation of the chi-square quantile; z=3.09 is p=0.001."""
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def exact_pair_distribution(model, sampling: Sampling) -> np.ndarray:
    """P(first two sampled tokens) under the target alone: p(a) * p(b | a)."""
    vocab = model.vocab_size
    model.truncate(0)
    first = probabilities(model.forward(PROMPT)[-1], sampling)
    joint = np.zeros((vocab, vocab))
    for a in range(vocab):
        model.truncate(len(PROMPT))
        joint[a] = first[a] * probabilities(model.forward([a])[-1], sampling)
    return joint


def chi_square(counts: np.ndarray, expected_p: np.ndarray) -> tuple[float, int]:
    expected = expected_p.flatten() * counts.sum()
    keep = expected > 0
    stat = float(((counts.flatten()[keep] - expected[keep]) ** 2 / expected[keep]).sum())
    return stat, int(keep.sum()) - 1


def sample_pairs(target, lookup=None, model=None, new_model=None) -> np.ndarray:
    """Unmeasured (flat) pass costs: drafts as long as they are likely at all. `new_model`
    makes a draft model for each run instead."""
    drafter = Hybrid(lookup, model, PassCosts(), Acceptance())
    vocab = target.vocab_size
    counts = np.zeros(vocab * vocab)
    rejected = 0
    for seed in range(RUNS):
        if new_model is not None:
            drafter = Hybrid(lookup, new_model(), PassCosts(), Acceptance())
        request = Request(max_new_tokens=2, sampling=Sampling(temperature=1.0, seed=seed))
        gen = generate_speculative(target, drafter, PROMPT, request, VOCABULARY, max_depth=4)
        counts[gen.tokens[0] * vocab + gen.tokens[1]] += 1
        rejected += gen.stats.drafted - gen.stats.accepted
    assert rejected > RUNS / 10  # the rejection path really ran
    return counts


@pytest.fixture(scope="module")
def models():
    return random_llama(seed=1), random_llama(seed=2)


def test_draft_model_sampling_matches_target(models):
    target, draft = models
    exact = exact_pair_distribution(target, SAMPLING)
    stat, df = chi_square(sample_pairs(target, model=DraftModel(draft)), exact)
    assert stat < chi_square_critical(df), f"chi2={stat:.1f} df={df}"


def test_a_draft_whose_head_keeps_a_shortlist_samples_as_the_target(models, monkeypatch):
    """Its head keeps ids 0-3 and those it has read (1, 2, 5, 7 of the prompt), so its q is zero
    at 4 and 6 when it drafts the first token: the target's residual must supply them. A new
    draft for each run, so that tokens generated earlier do not widen its shortlist."""
    monkeypatch.setattr(draft_model, "SHORTLIST", 4)
    target, _ = models
    draft = random_llama(seed=2)  # its own: the shortlist changes what its head computes
    model = DraftModel(draft)
    model.prefill(PROMPT)
    assert draft.head_rows.tolist() == [0, 1, 2, 3, 5, 7]
    exact = exact_pair_distribution(target, SAMPLING)
    stat, df = chi_square(sample_pairs(target, new_model=lambda: DraftModel(draft)), exact)
    assert stat < chi_square_critical(df), f"chi2={stat:.1f} df={df}"
    assert exact.sum(axis=1)[[4, 6]].min() > 0.02  # the target does choose tokens the draft cannot


def test_feature_draft_sampling_matches_target(models):
    """The draft that reads the target's features: its q depends on the target's own state."""
    target, _ = models
    exact = exact_pair_distribution(target, SAMPLING)
    stat, df = chi_square(sample_pairs(target, model=random_feature_draft(target, seed=3)), exact)
    assert stat < chi_square_critical(df), f"chi2={stat:.1f} df={df}"


def test_lookup_sampling_matches_target(models):
    """A deterministic drafter (one-hot q) that is often wrong: rejections must be exact too."""
    target, _ = models
    lookup = Lookup()
    lookup.set_document("doc", [5, 3, 3, 1, 5, 2, 7, 7, 0])
    exact = exact_pair_distribution(target, SAMPLING)
    stat, df = chi_square(sample_pairs(target, lookup=lookup), exact)
    assert stat < chi_square_critical(df), f"chi2={stat:.1f} df={df}"


def test_the_check_rejects_a_different_distribution(models):
    """Negative control: the draft model's own pair distribution fails the same test."""
    target, draft = models
    exact = exact_pair_distribution(target, SAMPLING)
    wrong = exact_pair_distribution(draft, SAMPLING)
    counts = np.random.default_rng(0).multinomial(RUNS, wrong.flatten() / wrong.sum()).astype(float)
    stat, df = chi_square(counts, exact)
    assert stat > chi_square_critical(df)
