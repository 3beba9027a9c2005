"""Verification: which drafted tokens the target keeps, and its own next token, read from one
pass's logits where the backend left them.

A GPU backend's logits stay in the GPU's memory: greedy verification copies one token id per
pass position to the host, rejection sampling the drafted tokens' probabilities and one drawn
id (engine/execution/pass_logits.py). The same code runs on the host's logits for the CPU
backends.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from engine.api import Sampling
from engine.drafters.base import Draft
from engine.execution.pass_logits import PassLogits
from engine.sampling import probabilities


class Verdict(NamedTuple):
    accepted: list[int]  # the draft nodes the target keeps, root to leaf
    next: int  # the target's own token after them


def verify_sampling(draft: Draft, logits: PassLogits, sampling: Sampling,
                    generator: np.random.Generator) -> Verdict:
    """Rejection sampling (Leviathan et al. 2023; Chen et al. 2023) on a chain: accept x_i
    with probability min(1, p(x_i) / q(x_i)), otherwise draw from normalize(max(0, p - q))
    and stop; all accepted, draw a bonus token from p. The output is distributed exactly as
    the target's own samples. Only p(x_i) for each drafted token and the drawn id cross."""
    if not draft.is_chain:
        raise ValueError("rejection sampling needs a chain draft")
    p = probabilities(logits.rows, sampling)  # on the logits' device
    k = len(draft)
    p_x = logits.to_host(p[list(range(k)), draft.tokens])
    q_x = [1.0] * k if draft.probs is None else [float(draft.probs[i][x]) for i, x in enumerate(draft.tokens)]
    for i, x in enumerate(draft.tokens):
        if generator.random() < min(1.0, p_x[i] / q_x[i]):
            continue
        if draft.probs is None:  # a deterministic drafter: all of q's mass on x
            residual = p[i].clone()
            residual[x] = 0.0
        else:
            residual = (p[i] - draft.probs[i].to(p.device)).clamp_(min=0.0)
        if logits.to_host(residual.sum()) <= 0:  # p == q: any token of p is a fair draw
            residual = p[i]
        return Verdict(list(range(i)), logits.draw(residual, generator))
    return Verdict(list(range(k)), logits.draw(p[k], generator))


def verify_greedy(draft: Draft, argmax: Sequence[int]) -> Verdict:
    """Walk the tree from the root, following the child that equals the target's argmax at its
    parent's pass position (Draft.pass_position)."""
    children = {(p, t): i for i, (p, t) in enumerate(zip(draft.parents, draft.tokens))}
    accepted: list[int] = []
    node = -1
    while True:
        best = argmax[draft.pass_position(node)]
        child = children.get((node, best))
        if child is None:
            return Verdict(accepted, best)
        accepted.append(child)
        node = child


def verify(draft: Draft, logits: PassLogits, sampling: Sampling, generator: np.random.Generator) -> Verdict:
    """The draft nodes the target keeps and its next token: greedy on a tree or a chain,
    sampling on a chain."""
    if sampling.greedy:
        return verify_greedy(draft, logits.argmax())
    return verify_sampling(draft, logits, sampling, generator)
