"""One pass's logits where the pass left them: a GPU's memory, or the host's.

Verification (engine/verification.py) asks for token ids and a few probabilities, never for
whole rows: a GPU backend's rows would be 152k floats a position for Qwen2.5-Coder, about
5.5 MB for a 9-token pass. `crossed` counts the elements copied to the host.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from engine.api import Sampling
from engine.sampling import draw, probabilities


class PassLogits:
    """Logits [positions, vocab] as a tensor on the backend's device (a CPU backend's numpy
    array is wrapped, not copied)."""

    def __init__(self, rows: torch.Tensor | np.ndarray):
        self.rows = torch.as_tensor(rows)
        self.crossed = 0

    def to_host(self, values: torch.Tensor | np.ndarray) -> list | int | float:
        """Values as Python numbers, counted."""
        self.crossed += int(np.prod(values.shape))
        return values.tolist()

    def argmax(self) -> list[int]:
        """Each position's most likely token."""
        return self.to_host(_argmax(self.rows))

    def pick(self, position: int, sampling: Sampling, generator: np.random.Generator,
             allowed: Sequence[int] | None = None) -> int:
        """The target's token at `position`: its argmax, or a draw; only among the `allowed`
        ids where given (token healing)."""
        row = self.rows[position]
        if allowed is not None:
            ids = torch.as_tensor(np.asarray(allowed, dtype=np.int64), device=row.device)
            row = torch.full_like(row, -torch.inf).index_copy_(0, ids, row[ids])
        if sampling.greedy:
            return self.to_host(_argmax(row))
        return self.draw(probabilities(row, sampling), generator)

    def draw(self, weights: torch.Tensor, generator: np.random.Generator) -> int:
        """An id drawn with these weights, where they are; only the id crosses."""
        self.crossed += 1
        return draw(weights, generator.random())


def largest(probs: torch.Tensor, k: int) -> tuple[list[float], list[int]]:
    """The k largest values of a row and their indices, largest first; only those cross. On
    the host by k argmaxes: numpy's argpartition took 10 ms on a vocabulary that is mostly
    zeros (a draft whose head keeps a shortlist, drafters/draft_model.py), torch's topk 0.3."""
    if probs.device.type != "cpu":
        values, ids = torch.topk(probs, k)
        return values.tolist(), ids.tolist()
    row = probs.float().numpy().copy()
    ids = []
    for _ in range(k):
        ids.append(int(row.argmax()))
        row[ids[-1]] = -np.inf
    return probs[ids].tolist(), ids


def _argmax(rows: torch.Tensor) -> torch.Tensor | np.ndarray:
    """The last axis's argmax: numpy's on the host (torch's took 0.18 ms a 152k row on a
    CPU, numpy's 0.02 ms), torch's on a device."""
    if rows.device.type == "cpu":
        return rows.float().numpy().argmax(-1)
    return rows.argmax(-1)


class TensorPasses:
    """For a backend whose passes leave their logits in a torch tensor (`_pass`): `forward`
    copies them to the host, `score` leaves them where they are."""

    def _pass(self, tokens: Sequence[int], parents: Sequence[int] | None, logits: bool) -> torch.Tensor | None:
        raise NotImplementedError

    def forward(self, tokens: Sequence[int], parents: Sequence[int] | None = None,
                logits: bool = True) -> np.ndarray | None:
        out = self._pass(tokens, parents, logits)
        return None if out is None else out.cpu().numpy()

    def score(self, tokens: Sequence[int], parents: Sequence[int] | None = None) -> PassLogits:
        return PassLogits(self._pass(tokens, parents, True))
