"""Merging candidate continuations into one token tree (a trie) under a node budget."""
from __future__ import annotations

from collections.abc import Sequence

from engine.drafters.base import Draft


def merge_candidates(candidates: Sequence[Sequence[int]], max_nodes: int) -> Draft:
    """A trie of the candidates, best first: shared prefixes are verified only once."""
    tokens: list[int] = []
    parents: list[int] = []
    children: dict[tuple[int, int], int] = {}  # (parent node, token) -> node
    for candidate in candidates:
        node = -1
        for token in candidate:
            child = children.get((node, token))
            if child is None:
                if len(tokens) >= max_nodes:
                    break
                child = len(tokens)
                tokens.append(token)
                parents.append(node)
                children[(node, token)] = child
            node = child
    return Draft(tokens, parents)
