"""Temperature, top-k and top-p shape the distribution as documented."""
import numpy as np

from engine.api import Sampling
from engine.draft_length import Acceptance, PassCosts, best_prefix, chain_length, match_bucket, model_bucket
from engine.sampling import probabilities

LOGITS = np.array([[2.0, 1.0, 0.5, 0.0, -1.0]], dtype=np.float32)


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x.astype(np.float64))
    return e / e.sum(-1, keepdims=True)


def test_temperature_one_is_softmax():
    np.testing.assert_allclose(probabilities(LOGITS, Sampling(1.0)), _softmax(LOGITS), rtol=1e-6)


def test_top_k_keeps_k_tokens_renormalised():
    p = probabilities(LOGITS, Sampling(1.0, top_k=2))[0]
    assert (p[2:] == 0).all()
    np.testing.assert_allclose(p[:2], _softmax(LOGITS[0, :2]), rtol=1e-6)


def test_top_p_keeps_the_smallest_set_reaching_p():
    full = _softmax(LOGITS[0])  # [0.57, 0.21, 0.13, 0.08, 0.03]
    p = probabilities(LOGITS, Sampling(1.0, top_p=0.7))[0]
    assert (p[2:] == 0).all() and p[0] > 0 and p[1] > 0
    np.testing.assert_allclose(p[:2], full[:2] / full[:2].sum(), rtol=1e-6)


def test_low_temperature_approaches_greedy():
    assert probabilities(LOGITS, Sampling(0.01))[0, 0] > 0.999


def steep(per_token: float) -> PassCosts:
    return PassCosts([0.0] + [1.0 + per_token * (w - 1) for w in range(1, 14)])


def test_verified_nodes_follow_their_chances_and_the_pass_cost():
    chances = [0.9, 0.8, 0.6, 0.3, 0.1, 0.02]
    assert best_prefix(chances, PassCosts())[0] == 6  # flat (a GPU): every likely node pays
    gentle, costly = best_prefix(chances, steep(0.1))[0], best_prefix(chances, steep(0.5))[0]
    assert 0 < costly < gentle < 6
    assert best_prefix([0.05, 0.01], steep(0.5))[0] == 0  # nothing pays: a plain pass
    n, rate = best_prefix([1.0, 1.0], steep(0.25))
    assert n == 2 and abs(rate - 3 / 1.5) < 1e-12


def test_pass_costs_extrapolate_past_the_measured_widths():
    costs = steep(0.25)
    assert costs.verify(13) == 4.0
    assert abs(costs.verify(21) - 6.0) < 1e-9  # the measured slope goes on
    assert costs.break_even(draft_cost=0.0) < costs.break_even(draft_cost=0.5)
    noisy = PassCosts([0.0, 3.0, 1.0, 1.2, 1.1, 1.5])  # load slowed two of the timings
    assert [noisy.verify(w) for w in range(1, 6)] == [1.0, 1.0, 1.1, 1.1, 1.5]


def test_chain_length_follows_acceptance_and_draft_cost():
    free = PassCosts([0.0] + [1.0] * 14)
    assert chain_length(0.9, free, 8) == 8
    priced = PassCosts([0.0] + [1.0] * 14, draft_cost=0.3)
    assert 0 < chain_length(0.9, priced, 8) < 8
    assert chain_length(0.2, priced, 8) == 0


def test_acceptance_is_calibrated_by_what_was_accepted():
    acceptance = Acceptance()
    prior = acceptance.chance("document", match_bucket(2), 0.5)
    for _ in range(30):
        acceptance.observe("document", match_bucket(2), 0.5, accepted=True)
    assert acceptance.chance("document", match_bucket(2), 0.5) > 1.5 * prior
    for _ in range(60):
        acceptance.observe("model", model_bucket(0.95), 0.95, accepted=False)
    assert acceptance.chance("model", model_bucket(0.95), 0.95) < 0.2
    assert acceptance.chance("model", model_bucket(0.5), 0.5) == 0.5  # other buckets untouched
