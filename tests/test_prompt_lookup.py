"""The n-gram index: context first, then documents; incremental updates; bounded memory."""
import torch

from engine.drafters.prompt_lookup import PromptLookup
from engine.drafters.tree import merge_candidates
from engine.api import Sampling


def propose(lookup: PromptLookup, context: list[int], k: int = 4) -> list[int]:
    return lookup.propose(context, k, Sampling(), torch.Generator()).tokens


def test_most_recent_context_match_first():
    lookup = PromptLookup(ngram_sizes=(2,))
    context = [1, 2, 3, 4, 9, 1, 2, 5, 6, 7, 1, 2]
    assert lookup.candidates(context, 3) == [[5, 6, 7], [3, 4, 9]]


def test_longest_ngram_wins():
    lookup = PromptLookup(ngram_sizes=(3, 1))
    context = [8, 2, 3, 4, 7, 3, 5, 1, 2, 3]  # "2 3" -> 4 (3-gram 1? no: [1,2,3] absent)
    assert propose(lookup, context) == [5, 1, 2, 3]  # 1-gram "3": most recent is index 5
    lookup.set_document("a", [0, 1, 2, 3, 42, 43])
    assert propose(lookup, context) == [42, 43]  # the 3-gram "1 2 3" matches the document


def test_documents_update_incrementally_and_stale_entries_are_ignored():
    lookup = PromptLookup(ngram_sizes=(2,))
    lookup.set_document("a", [1, 2, 10, 11])
    assert propose(lookup, [5, 1, 2]) == [10, 11]
    lookup.set_document("a", [1, 2, 20, 21, 22])  # the file changed
    assert propose(lookup, [5, 1, 2]) == [20, 21, 22]
    lookup.set_document("a", [7, 7, 7])  # "1 2" no longer in it: its old entry is stale
    assert propose(lookup, [5, 1, 2]) == []
    lookup.set_document("b", [1, 2, 30])
    lookup.remove_document("b")
    assert propose(lookup, [5, 1, 2]) == []


def test_memory_is_bounded_by_evicting_least_recent_documents():
    lookup = PromptLookup(ngram_sizes=(2,), max_document_tokens=100)
    for i in range(10):
        lookup.set_document(f"doc{i}", list(range(i * 100, i * 100 + 40)))
    assert lookup.document_tokens <= 100
    assert propose(lookup, [900, 901]) == [902, 903, 904, 905]  # the newest is kept
    assert propose(lookup, [0, 1]) == []  # the oldest was evicted
    assert len(lookup._index) <= 2 * 100 * 2  # stale entries were pruned too


def test_candidates_merge_into_a_trie():
    draft = merge_candidates([[1, 2, 3], [1, 2, 4], [5]], max_nodes=10)
    assert draft.tokens == [1, 2, 3, 4, 5]
    assert draft.parents == [-1, 0, 1, 1, -1]
    assert merge_candidates([[1, 2, 3], [4, 5]], max_nodes=4).tokens == [1, 2, 3, 4]
