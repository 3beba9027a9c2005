"""One token tree from several drafters' proposals, verified in one pass.

Each proposed node carries the chance the target accepts it (its path's, calibrated: see
engine/draft_length.py), the source that proposed it, and what calibration learns from the
outcome. Proposals of the same token under the same parent merge into one node (shared prefixes
are verified once) and keep the best chance. `select` keeps the nodes worth a place in the pass.
"""
from __future__ import annotations

from dataclasses import dataclass

from engine.draft_length import PassCosts, best_prefix
from engine.drafters.base import Draft, NodeInfo


@dataclass
class _Node:
    token: int
    parent: int
    chance: float
    info: NodeInfo


class TokenTree:
    def __init__(self) -> None:
        self.nodes: list[_Node] = []
        self._index: dict[tuple[int, int], int] = {}  # (parent, token) -> node

    def __len__(self) -> int:
        return len(self.nodes)

    def add(self, parent: int, token: int, chance: float, info: NodeInfo) -> int:
        """The node for `token` under `parent` (-1: the root), created or improved."""
        node = self._index.get((parent, token))
        if node is None:
            node = len(self.nodes)
            self.nodes.append(_Node(token, parent, chance, info))
            self._index[(parent, token)] = node
        elif chance > self.nodes[node].chance:
            self.nodes[node].chance, self.nodes[node].info = chance, info
        return node

    def best_path(self) -> list[int]:
        """The nodes of the likeliest chain from the root."""
        kids: dict[int, int] = {}  # parent -> its likeliest child
        for i, n in enumerate(self.nodes):
            if n.parent not in kids or n.chance > self.nodes[kids[n.parent]].chance:
                kids[n.parent] = i
        path, node = [], -1
        while node in kids:
            node = kids[node]
            path.append(node)
        return path

    def ranked(self) -> list[int]:
        """Nodes by chance, best first; a parent before its children on ties."""
        return sorted(range(len(self.nodes)), key=lambda i: (-self.nodes[i].chance, i))

    def select(self, costs: PassCosts, spent: float = 0.0, limit: int | None = None,
               keep: int = 0) -> Draft:
        """The best nodes as a Draft (parents before children): as many as maximise expected
        tokens per second (at least `keep`, at most `limit`)."""
        order = self.ranked()[:limit]
        n, _ = best_prefix([self.nodes[i].chance for i in order], costs, spent)
        chosen = sorted(order[:max(n, min(keep, len(order)))])  # creation order: parents first
        where: dict[int, int] = {}  # node -> its index in the draft
        draft = Draft()
        for old in chosen:
            node = self.nodes[old]
            if node.parent != -1 and node.parent not in where:
                continue  # its parent was not chosen
            where[old] = len(draft.tokens)
            draft.tokens.append(node.token)
            draft.parents.append(where[node.parent] if node.parent != -1 else -1)
            draft.info.append(node.info)
        return draft
