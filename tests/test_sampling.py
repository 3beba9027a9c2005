"""Temperature, top-k and top-p shape the distribution as documented."""
import torch

from engine.draft_length import DraftLength, expected_tokens
from engine.api import Sampling
from engine.sampling import probabilities

LOGITS = torch.tensor([[2.0, 1.0, 0.5, 0.0, -1.0]])


def test_temperature_one_is_softmax():
    torch.testing.assert_close(probabilities(LOGITS, Sampling(1.0)), torch.softmax(LOGITS, -1))


def test_top_k_keeps_k_tokens_renormalised():
    p = probabilities(LOGITS, Sampling(1.0, top_k=2))[0]
    assert (p[2:] == 0).all()
    torch.testing.assert_close(p[:2], torch.softmax(LOGITS[0, :2], -1))


def test_top_p_keeps_the_smallest_set_reaching_p():
    full = torch.softmax(LOGITS[0], -1)  # [0.57, 0.21, 0.13, 0.08, 0.03]
    p = probabilities(LOGITS, Sampling(1.0, top_p=0.7))[0]
    assert (p[2:] == 0).all() and p[0] > 0 and p[1] > 0
    torch.testing.assert_close(p[:2], full[:2] / full[:2].sum())


def test_low_temperature_approaches_greedy():
    assert probabilities(LOGITS, Sampling(0.01))[0, 0] > 0.999


def test_draft_length_follows_acceptance_and_pass_cost():
    flat = DraftLength(k_max=8)  # verification costs the same at every width: draft all
    assert flat.next() == 8
    steep = DraftLength(k_max=8, pass_cost=[0.0] + [1.0 + 0.25 * (w - 1) for w in range(1, 10)])
    k_confident = steep.next()
    for _ in range(3):
        steep.update(drafted=4, accepted=0)
    assert steep.acceptance < 0.3
    assert 0 <= steep.next() < k_confident


def test_draft_length_pauses_when_drafts_fail_and_probes_again():
    k = DraftLength(k_max=8, pass_cost=[0.0] + [1.0 + 0.5 * (w - 1) for w in range(1, 10)])
    for _ in range(10):
        k.update(drafted=k.k_max, accepted=0)
    pauses = [k.next() for _ in range(8)]
    assert pauses.count(0) == 6 and pauses[3] == 1 and pauses[7] == 1


def test_expected_tokens_is_the_geometric_sum():
    assert expected_tokens(0.0, 5) == 1
    assert expected_tokens(1.0, 5) == 6
    assert abs(expected_tokens(0.5, 2) - 1.75) < 1e-12
