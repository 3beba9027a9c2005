"""Temperature, top-k and top-p shape the distribution as documented."""
import torch

from engine.decoding import DraftLength
from engine.sampling import Sampling, probabilities

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


def test_draft_length_grows_on_success_and_pauses_on_failure():
    k = DraftLength(k_max=8, k_start=4)
    k.update(drafted=4, accepted=4)
    assert k.next() == 6
    for _ in range(10):
        k.update(drafted=k.k, accepted=0)
    assert k.k == 1
    pauses = [k.next() for _ in range(5)]
    assert pauses[:4] == [0, 0, 0, 0] and pauses[4] == 1  # it probes again after a pause
