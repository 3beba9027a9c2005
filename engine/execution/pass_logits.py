"""One pass's logits where the pass left them: a GPU's memory, or the host's.

Verification (engine/verification.py) asks for token ids and a few probabilities, never for
whole rows: a GPU backend's rows would be 152k floats a position for Qwen2.5-Coder, about
5.5 MB for a 9-token pass. `crossed` counts the elements copied to the host. A host backend's
numpy rows are read with numpy: greedy decoding on the native backend never imports torch.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from engine.api import Sampling
from engine.sampling import draw, probabilities

if TYPE_CHECKING:
    import torch


class PassLogits:
    """Logits [positions, vocab]: a numpy array (a CPU backend's), or a torch tensor on the
    backend's device."""

    def __init__(self, rows: np.ndarray | torch.Tensor):
        self.rows = rows
        self.crossed = 0

    def to_host(self, values: np.ndarray | torch.Tensor) -> list | int | float:
        """Values as Python numbers, counted."""
        self.crossed += int(np.prod(values.shape))
        return values.tolist()

    def argmax(self) -> list[int]:
        """Each position's most likely token."""
        return self.to_host(_argmax(self.rows))

    def pick(self, position: int, sampling: Sampling, generator: np.random.Generator,
             allowed: Sequence[int] | None = None) -> int:
        """The target's token at `position`: its argmax, or a draw; only among the `allowed`
        ids where given (token healing: the others as if their logits were -inf)."""
        row = self.rows[position]
        ids = None if allowed is None else np.asarray(allowed, dtype=np.int64)
        if ids is not None:
            row = row[ids]
        at = self.to_host(_argmax(row)) if sampling.greedy else self.draw(probabilities(row, sampling), generator)
        return at if ids is None else int(ids[at])

    def draw(self, weights: torch.Tensor, generator: np.random.Generator) -> int:
        """An id drawn with these weights, where they are; only the id crosses."""
        self.crossed += 1
        return draw(weights, generator.random())


def largest(probs: torch.Tensor, k: int) -> tuple[list[float], list[int]]:
    """The k largest values of a row and their indices, largest first; only those cross. On
    the host by k argmaxes: numpy's argpartition took 10 ms on a vocabulary that is mostly
    zeros (a draft whose head keeps a shortlist, drafters/draft_model.py), torch's topk 0.3."""
    if probs.device.type != "cpu":
        values, ids = probs.topk(k)
        return values.tolist(), ids.tolist()
    row = probs.float().numpy().copy()
    ids = []
    for _ in range(k):
        ids.append(int(row.argmax()))
        row[ids[-1]] = -np.inf
    return probs[ids].tolist(), ids


def _argmax(rows: np.ndarray | torch.Tensor) -> np.ndarray | torch.Tensor:
    """The last axis's argmax: numpy's on the host (torch's took 0.18 ms a 152k row on a
    CPU, numpy's 0.02 ms), torch's on a device."""
    if isinstance(rows, np.ndarray):
        return rows.argmax(-1)
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
        return None if out is None else out.float().cpu().numpy()

    def score(self, tokens: Sequence[int], parents: Sequence[int] | None = None) -> PassLogits:
        return PassLogits(self._pass(tokens, parents, True))
