"""Lookup that remembers: longest matches first, frequency-scored continuations in one tree,
documents and outputs kept current, memory bounded."""
from engine.draft_length import Acceptance, PassCosts
from engine.drafters.base import NodeInfo
from engine.drafters.corpus import Corpus
from engine.drafters.lookup import Lookup
from engine.drafters.tree import TokenTree


def tree_of(lookup: Lookup, context: list[int], depth: int = 6, max_nodes: int = 32) -> TokenTree:
    tree = TokenTree()
    lookup.grow(tree, context, depth, max_nodes, floor=0.0)
    return tree


def best_path(tree: TokenTree) -> list[int]:
    """The most likely chain from the root."""
    path, node = [], -1
    while kids := [i for i, n in enumerate(tree.nodes) if n.parent == node]:
        node = max(kids, key=lambda i: tree.nodes[i].chance)
        path.append(tree.nodes[node].token)
    return path


def first_level(tree: TokenTree) -> dict[int, float]:
    return {n.token: n.chance for n in tree.nodes if n.parent == -1}


def test_the_longest_match_wins_over_a_more_recent_shorter_one():
    lookup = Lookup()
    lookup.set_document("a", [7, 8, 1, 2, 3, 40, 41, 42])  # "8 1 2 3" goes on with 40
    context = [9, 2, 3, 50, 6, 8, 1, 2, 3]  # "2 3" was followed by 50 in the context itself
    tree = tree_of(lookup, context)
    assert best_path(tree)[:3] == [40, 41, 42]
    assert {n.token for n in tree.nodes if n.parent == -1} == {40, 50}


def test_frequent_continuations_rank_first_and_rarer_ones_branch():
    lookup = Lookup()
    context = [10, 1, 2, 3, 11, 1, 2, 3, 12, 1, 2, 4, 13, 1, 2, 3, 14, 1, 2]  # "1 2": 3, 3, 4, 3
    chances = first_level(tree_of(lookup, context))
    assert set(chances) == {3, 4}
    assert chances[3] > 2 * chances[4]


def test_documents_update_and_stale_text_never_matches():
    lookup = Lookup()
    lookup.set_document("a", [5, 6, 7, 10, 11])
    assert best_path(tree_of(lookup, [1, 5, 6, 7])) == [10, 11]
    lookup.set_document("a", [5, 6, 7, 20, 21, 22])  # the file changed
    assert best_path(tree_of(lookup, [1, 5, 6, 7])) == [20, 21, 22]
    lookup.set_document("a", [9, 9, 9])
    assert best_path(tree_of(lookup, [1, 5, 6, 7])) == []
    lookup.set_document("b", [5, 6, 7, 30])
    lookup.remove_document("b")
    assert best_path(tree_of(lookup, [1, 5, 6, 7])) == []
    assert lookup.documents == 1


def test_each_source_is_named_and_a_file_moves_between_them():
    lookup = Lookup()
    lookup.set_document("ws", [1, 2, 3, 4, 60, 61], source="workspace")
    lookup.remember([7, 7, 8, 8, 70, 71])
    sources = {n.token: n.info.source for n in tree_of(lookup, [0, 1, 2, 3, 4]).nodes}
    assert sources[60] == "workspace"
    assert {n.token: n.info.source for n in tree_of(lookup, [0, 7, 8, 8]).nodes}[70] == "history"
    lookup.set_document("ws", [1, 2, 3, 4, 60, 61])  # opened in the editor
    assert {n.info.source for n in tree_of(lookup, [0, 1, 2, 3, 4]).nodes} == {"document"}
    assert lookup.documents == 1


def test_walking_along_equals_matching_afresh():
    """Per step the walkers read only the accepted tokens; the tree must be what a lookup that
    reads the whole context at once builds."""
    doc = [i % 7 for i in range(40)] + [3, 1, 4, 1, 5, 9, 2, 6]
    context = [5, 3, 1, 4, 1, 5, 3, 1]
    walking = Lookup()
    walking.set_document("d", doc)
    for token in [9, 2, 6, 0, 1, 2, 3, 3, 1, 4]:
        context = context + [token]
        fresh = Lookup()
        fresh.set_document("d", doc)
        got, want = tree_of(walking, context), tree_of(fresh, context)
        assert [(n.token, n.parent, round(n.chance, 9)) for n in got.nodes] == \
               [(n.token, n.parent, round(n.chance, 9)) for n in want.nodes]


def test_memory_is_bounded_per_source():
    corpus = Corpus(max_tokens=1000)
    for i in range(100):
        corpus.set(f"doc{i}", [(i * 37 + j * 11) % 5000 for j in range(100)])
    assert corpus.tokens <= 1000 and len(corpus) == 10
    assert "doc99" in corpus and "doc0" not in corpus
    # removed text is reclaimed: the automaton stays within a few states per live token
    assert corpus.automaton.states <= 2.5 * corpus.tokens + 4096
    lookup = Lookup(budgets={"document": 100, "workspace": 100, "history": 20})
    for i in range(5):
        lookup.remember([100 + i] * 3 + [i, i + 1, i + 2, i + 3])
    assert lookup.corpora["history"].tokens <= 20
    assert best_path(tree_of(lookup, [104, 104, 4]))[:2] == [5, 6]  # the newest is kept
    assert best_path(tree_of(lookup, [100, 100, 0])) == []  # the oldest was dropped


def test_calibration_follows_what_the_target_accepts():
    acceptance = Acceptance()
    lookup = Lookup(acceptance)
    context = [1, 2, 3, 9, 1, 2]
    before = first_level(tree_of(lookup, context))[3]
    for _ in range(20):
        acceptance.observe("document", 1, 1.0, accepted=False)  # 2-token matches kept failing
    assert first_level(tree_of(lookup, context))[3] < before / 3


def test_the_tree_merges_sources_and_keeps_what_pays():
    tree = TokenTree()
    info = NodeInfo("document", 0, 1.0)
    a = tree.add(-1, 5, 0.9, info)
    b = tree.add(a, 6, 0.8, info)
    assert tree.add(-1, 5, 0.95, NodeInfo("model", 3, 0.95)) == a  # the same node, improved
    tree.add(b, 7, 0.3, info)
    tree.add(-1, 8, 0.05, info)
    flat = tree.select(PassCosts())  # every width costs the same: everything pays
    assert flat.tokens == [5, 6, 7, 8] and flat.parents == [-1, 0, 1, -1]
    assert flat.info[0].source == "model"
    steep = tree.select(PassCosts([0.0] + [1.0 + 0.3 * (w - 1) for w in range(1, 10)]))
    assert steep.tokens == [5, 6]
