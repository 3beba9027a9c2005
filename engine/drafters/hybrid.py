"""Every speculative mode drafts here: lookup alone (`lookup`), a draft model alone (`draft`),
or both in one token tree (`hybrid`).

Lookup costs next to nothing, so it always runs; its tree says how likely its tokens are. A
draft model pass costs real time, so the model runs only where the tree it is expected to add
makes verification faster, its drafting time included (SAM-Decoding's "model where the match
is short", with the threshold measured instead of fixed): it reads lookup's likeliest path in
its first pass, its own guess may be right where lookup's token is wrong, and its chain goes
on after the path, each token right with the rates measured for it. With cheap draft passes
(a GPU) it runs nearly always; with passes a third of the target's (a 0.5B draft beside a
1.5B on this CPU) only where lookup has little. The tree verified is the subset of nodes that
maximises expected tokens per second (engine/draft_length.py), and what the target accepted
calibrates each source's chances.

Sampling uses a single chain (rejection sampling is proven exact for chains): lookup's best
path if it is more likely than the model's first token, else the model's own sampled chain.
"""
from __future__ import annotations

import time
from bisect import insort
from collections.abc import Sequence
from operator import neg

import numpy as np

from engine.api import Sampling
from engine.draft_length import Acceptance, PassCosts, best_prefix, chain_length
from engine.drafters.base import Draft, ModelDrafter
from engine.drafters.lookup import Lookup
from engine.drafters.tree import TokenTree

PROBE_EVERY = 4  # while nothing pays, still verify the best node every this many passes
MODEL_PROBE_EVERY = 4  # and run the draft model after this many drafts without it,
_PROBE_MOST = 64  # twice as many after each such run, up to this many
_LAG = 8  # most unread tokens a model run is charged for
_CHECKED = 8  # most tokens of lookup's likeliest path the model reads before drafting on
_RATE = 0.2  # weight of each model run in the running ratio of its actual to predicted time
# Every this many passes, while the costs of some pass width have been timed fewer than
# _TIMED_ENOUGH times, a pass is made that wide where the tree has the nodes (so a kept
# calibration that priced wide passes high is corrected, not kept for good).
EXPLORE_EVERY = 32
_TIMED_ENOUGH = 12


class Hybrid:
    def __init__(self, lookup: Lookup | None, model: ModelDrafter | None, costs: PassCosts,
                 acceptance: Acceptance, max_nodes: int = 32, trees: bool = True):
        self.lookup, self.model = lookup, model
        self.costs, self.acceptance = costs, acceptance
        self.max_nodes = max_nodes
        self.trees = trees  # the target verifies token trees; else it gets the best chain
        self._costs_version = -1  # the pass costs' version that `floor` and the model's tuning follow
        self.floor = 0.0  # lookup explores nothing less likely
        self._model_chain: list[int] = []  # the model's first choice at each level, last draft
        self._model_ran = False  # did the model run for the last draft?
        self._idle = 0
        self._drafts = 0  # for EXPLORE_EVERY
        self._skipped = 0  # drafts since the model last ran
        self._probe_every = MODEL_PROBE_EVERY
        # What model runs really took over what their passes were predicted to take (the
        # draft's pass cost is timed alone; a run also pays Python, sampling and reading what
        # it has not seen), as a running ratio that scales the predictions.
        self.draft_time_ratio = 1.0

    def propose(self, context: Sequence[int], k: int, sampling: Sampling,
                generator: np.random.Generator) -> Draft:
        self._model_chain, self._model_ran = [], False
        if self._costs_version != self.costs.version:  # timed passes corrected the costs: follow them
            self._costs_version = self.costs.version
            self.floor = self.costs.least_useful_chance(self.max_nodes)
            if self.model is not None:
                self.model.tune(self.costs)
        tree = TokenTree()
        if self.lookup is not None:
            self.lookup.grow(tree, context, k, self.max_nodes, self.floor)
        if not sampling.greedy:
            return self._chain(tree, context, k, sampling, generator)
        spent = 0.0
        if self.model is not None and k > 0:
            path = tree.best_path()[:_CHECKED] if self.model.reads_prefix else []
            pays = self._model_pays(tree, path, context, k)
            # Now and then it runs although it seems not to pay, so its rates stay current;
            # less and less often while it keeps not paying.
            self._skipped += 1
            probe = not pays and self._skipped >= self._probe_every
            if pays:
                self._probe_every = MODEL_PROBE_EVERY
            elif probe:
                self._probe_every = min(2 * self._probe_every, _PROBE_MOST)
            if pays or probe:
                self._skipped, self._model_ran = 0, True
                first_pass = self._first_pass(context, path)
                start = time.perf_counter()
                drafted = self.model.propose(context, k, sampling, generator,
                                             [tree.nodes[i].token for i in path])
                spent = time.perf_counter() - start
                self._merge(tree, drafted)
                predicted = first_pass + self.costs.draft_cost * max(0, len(self._model_chain) - 1)
                if predicted > 0:
                    self.draft_time_ratio += _RATE * (spent / predicted - self.draft_time_ratio)
        keep = 0
        if best_prefix([tree.nodes[i].chance for i in tree.ranked()[:1]], self.costs, spent)[0] == 0:
            self._idle += 1
            keep = 1 if self._idle % PROBE_EVERY == 0 else 0
        self._drafts += 1
        if self._drafts % EXPLORE_EVERY == 0:
            untimed = self.costs.untimed_width(_TIMED_ENOUGH)
            keep = max(keep, untimed - 1 if untimed else 0)  # a pass of `untimed` tokens
        if not self.trees:
            return self._best_chain(tree, spent, keep)
        return tree.select(self.costs, spent, self.max_nodes, keep=keep)

    def _best_chain(self, tree: TokenTree, spent: float, keep: int) -> Draft:
        """For a target that verifies chains only: the likeliest path, as far as it pays."""
        path = tree.best_path()[:self.max_nodes]
        n, _ = best_prefix([tree.nodes[i].chance for i in path], self.costs, spent)
        chosen = path[:max(n, min(keep, len(path)))]
        return Draft.chain([tree.nodes[i].token for i in chosen], info=[tree.nodes[i].info for i in chosen])

    def _model_pays(self, tree: TokenTree, path: list[int], context: Sequence[int], k: int) -> bool:
        """Would the tree be faster (expected tokens per second, its drafting time included)
        with what the model is expected to add? Its first pass reads lookup's likeliest path:
        where a token there is wrong, its own guess may be right; its chain goes on from where
        it parts from the path (or after the path), each token right with its measured rates,
        a pass each."""
        first, following = self.acceptance.model_first, self.acceptance.model_next
        d = self.costs.draft_cost * self.draft_time_ratio
        chances = sorted((n.chance for n in tree.nodes), reverse=True)[:self.max_nodes]
        now = best_prefix(chances, self.costs)[1]
        reach = 1.0  # the chance lookup's path is right up to here
        for i in path:
            insort(chances, first * (reach - tree.nodes[i].chance), key=neg)
            reach = tree.nodes[i].chance
        if self.model.reads_prefix:
            # Its chain goes on from wherever it parts from the path. The chances of parting at
            # each place and of following the path to its end sum to one, so its l-th token past
            # the parting one is right with first * following**l, wherever that is.
            start = first
        else:  # its chain starts where lookup's first tokens are
            reach = 1.0 - min(1.0, sum(n.chance for n in tree.nodes if n.parent == -1))
            start = reach * first
        spent = self._first_pass(context, path) * self.draft_time_ratio
        chance = reach * first  # its token after the path, from the first pass's logits
        for depth in range(k - len(path)):
            # That token may be below the floor (a long path is seldom followed to its end)
            # while the chain past a parting token is not; deeper tokens only get less likely.
            if chance >= self.floor:
                insort(chances, chance, key=neg)
            elif depth:
                break
            spent += d if depth else 0.0  # each token past the first pass costs a draft pass
            if best_prefix(chances[:self.max_nodes], self.costs, spent)[1] > now:
                return True
            chance = start * following ** (depth + 1)
        return False

    def _first_pass(self, context: Sequence[int], path: list[int]) -> float:
        """The predicted time of the model's first pass: it reads what it has not seen (the
        tokens drafted since it last ran; a longer lag is read once whenever it runs next, so
        only a few count) and lookup's path."""
        width = min(self.model.behind(context), _LAG) + len(path)
        return self.costs.draft_cost * self.costs.verify(width) / self.costs.verify(1)

    def _merge(self, tree: TokenTree, drafted: Draft) -> None:
        """Add the model's nodes; each one's chance is its parent's (as the tree has it now,
        lookup's or the model's) times the model's calibrated own. Note its chain of first
        choices for `observe`."""
        last = -1
        for i, (parent, info) in enumerate(zip(drafted.parents, drafted.info)):
            if parent == last and info.top:
                self._model_chain.append(drafted.tokens[i])
                last = i
        where: list[int] = []
        for token, parent, info in zip(drafted.tokens, drafted.parents, drafted.info):
            above = -1 if parent == -1 else where[parent]
            base = 1.0 if above == -1 else tree.nodes[above].chance
            chance = base * self.acceptance.chance(info.source, info.bucket, info.score)
            where.append(tree.add(above, token, chance, info))

    def _chain(self, tree: TokenTree, context: Sequence[int], k: int, sampling: Sampling,
               generator: np.random.Generator) -> Draft:
        """For rejection sampling: lookup's most likely path, or the model's sampled chain."""
        chain = tree.best_path()
        chances = [tree.nodes[i].chance for i in chain]
        n, _ = best_prefix(chances, self.costs)
        if self.model is None or (n and chances[0] >= self.acceptance.model_first):
            return Draft.chain([tree.nodes[i].token for i in chain[:n]],
                               info=[tree.nodes[i].info for i in chain[:n]])
        length = chain_length(self.acceptance.model_next, self.costs, k)
        return self.model.propose(context, length, sampling, generator) if length else Draft()

    def observe(self, draft: Draft, accepted: Sequence[int], next_token: int,
                pass_seconds: float = 0.0) -> None:
        """Calibrate each tested node's source, and how often the model's first choices (in
        the verified tree or not) were the target's tokens; a timed pass corrects what passes
        of its width cost."""
        if pass_seconds:
            self.costs.observe(len(draft) + 1, pass_seconds)
        taken = set(accepted)
        for node in draft.tested(accepted):
            info = draft.info[node]
            self.acceptance.observe(info.source, info.bucket, info.score, node in taken)
        known = [draft.tokens[i] for i in accepted] + [next_token]  # the target's own tokens
        chain = self._model_chain
        if chain:
            following = []
            for i in range(1, min(len(chain), len(known))):
                if chain[i - 1] != known[i - 1]:
                    break
                following.append(chain[i] == known[i])
            self.acceptance.observe_model(chain[0] == known[0], following)
        elif self._model_ran:  # it ran and was too unsure to draft: as good as a wrong guess
            self.acceptance.observe_model(False, [])
