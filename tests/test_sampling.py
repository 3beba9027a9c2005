"""Temperature, top-k and top-p shape the distribution as documented."""
import numpy as np

from engine.api import Sampling
from engine.draft_length import Acceptance, PassCosts, best_prefix, chain_length, match_bucket, model_bucket
from engine.sampling import draw, probabilities as _probabilities

LOGITS = np.array([[2.0, 1.0, 0.5, 0.0, -1.0]], dtype=np.float32)


def probabilities(logits: np.ndarray, s: Sampling) -> np.ndarray:
    return _probabilities(logits, s).numpy()


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


def test_a_uniform_number_picks_by_the_cumulative_weights():
    weights = np.array([0.0, 0.25, 0.0, 0.75, 0.0], dtype=np.float32)
    assert [draw(weights, u) for u in (0.0, 0.2, 0.25, 0.9, 1.0 - 1e-17)] == [1, 1, 3, 3, 3]
    assert draw(np.array([0.0, 1.0, 0.0]), 0.999999) == 1  # never a zero weight


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


# A calibration kept from a first start (timed once, while something else ran) and what the
# passes took when timed again, 7 times each (ms; the 1.5B Q4_K_M on 2 Xeon cores, AMX: 9-16
# tokens are one tile). Widths between the timed ones interpolated.
KEPT = [68, 88, 102, 116, 169, 223, 277, 330] + [548] * 8 + [548 + 34.3 * w for w in range(1, 9)]
TIMED = [63, 77, 89, 98, 125, 135, 155, 174, 210, 235, 233, 232, 238, 242, 246, 249]


def test_timed_passes_correct_a_calibration_that_priced_wide_passes_too_high():
    costs = PassCosts([0.0] + [ms / 1000 for ms in KEPT], learn=True)
    true = [0.0] + [ms / 1000 for ms in TIMED]
    break_even = costs.break_even()
    for _ in range(50):  # the widths decoding verifies most
        for width in (1, 2, 3, 5, 8, 12):
            costs.observe(width, true[width])
    for width in (1, 2, 3, 5, 8, 12, 16):
        assert abs(costs.verify(width) / true[width] - 1) < 0.15, width
    assert costs.verify(10) == costs.verify(16)  # the tile's shape is kept: 9-16 cost alike
    assert costs.break_even() < 0.8 * break_even  # longer drafts pay now
    assert costs.version == 300


def test_one_slow_pass_moves_the_costs_little_and_unlearnt_costs_never():
    costs = PassCosts([0.0] + [ms / 1000 for ms in TIMED], learn=True)
    before = costs.verify(4)
    for _ in range(20):
        costs.observe(4, before)
    costs.observe(4, 50 * before)  # something else ran
    assert before < costs.verify(4) < 1.08 * before
    fixed = PassCosts([0.0] + [ms / 1000 for ms in TIMED])
    fixed.observe(4, 50 * before)
    assert fixed.verify(4) == before and fixed.version == 0
    assert costs.version == 21


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
