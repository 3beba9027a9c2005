"""KV cache: rollback, prefix reuse, and tree attention against fresh computation (fp32)."""
import threading

import pytest
import torch

from engine.drafters.base import Draft
from tests.code_samples import stdlib_text

ATOL = 2e-3  # fp32 logits; different pass widths sum in different orders


@pytest.fixture(scope="module")
def target(fp32_engine):
    return fp32_engine.target


@pytest.fixture(scope="module")
def tokens(fp32_engine):
    return fp32_engine.tokenizer.encode(stdlib_text("heapq.py"))[:300]


def fresh_logits(target, tokens):
    target.truncate(0)
    return target.forward(tokens)


def test_truncate_then_reforward_equals_fresh(target, tokens):
    expected = fresh_logits(target, tokens[:120])
    target.truncate(0)
    target.forward(tokens[:100])
    target.forward([7, 8, 9, 10])  # tokens that will be rolled back
    target.truncate(90)
    got = target.forward(tokens[90:120])
    torch.testing.assert_close(got, expected[90:], atol=ATOL, rtol=0)


def test_sync_reuses_the_common_prefix(target, tokens):
    target.truncate(0)
    assert target.sync(tokens[:200]) == 0
    assert target.sync(tokens[:150] + [5, 6]) == 150
    assert target.tokens == tokens[:150] + [5, 6]
    assert target.sync(tokens[:220]) == 150
    expected = fresh_logits(target, tokens[:221])[-1]
    target.truncate(0)
    target.sync(tokens[:220])
    torch.testing.assert_close(target.forward([tokens[220]])[-1], expected, atol=ATOL, rtol=0)


def test_tree_pass_equals_sequential_decoding_of_each_path(target, tokens):
    prefix = tokens[:80]
    # root -> a -> b, root -> c -> d -> e, a -> f : three paths in one pass
    nodes = [tokens[80], tokens[81], 300, 301, 302, 303]
    parents = [-1, 0, -1, 2, 3, 0]
    target.truncate(0)
    target.forward(prefix)
    tree = target.forward(nodes, parents)
    for leaf in (1, 4, 5):
        path = []
        node = leaf
        while node >= 0:
            path.insert(0, node)
            node = parents[node]
        sequential = fresh_logits(target, prefix + [nodes[i] for i in path])[-len(path):]
        torch.testing.assert_close(tree[path], sequential, atol=ATOL, rtol=0)


def test_keep_compacts_an_accepted_tree_path(target, tokens):
    prefix = tokens[:60]
    nodes, parents = [500, tokens[60], 501, tokens[61]], [-1, -1, 1, 1]
    target.truncate(0)
    target.forward(prefix)
    target.forward(nodes, parents)
    target.keep(len(prefix), [1, 3])  # the path tokens[60], tokens[61]
    assert target.tokens == tokens[:62]
    got = target.forward(tokens[62:70])
    torch.testing.assert_close(got, fresh_logits(target, tokens[:70])[62:], atol=ATOL, rtol=0)


def test_draft_pass_positions_address_each_node_in_one_verification_pass(target, tokens):
    """Draft.pass_position / pass_parents: node i of a draft tree is scored by the pass row that
    sequential decoding of its path would give; the root row scores the current token."""
    prefix, current = tokens[:90], tokens[90]
    draft = Draft(tokens=[tokens[91], tokens[92], 400, 401, 402], parents=[-1, 0, -1, 2, 2])
    assert Draft.chain(draft.tokens).pass_parents() is None  # a chain is a plain causal pass
    target.truncate(0)
    target.forward(prefix)
    rows = target.forward([current] + draft.tokens, draft.pass_parents())
    for node in range(-1, len(draft)):
        path, up = [], node
        while up >= 0:
            path.insert(0, draft.tokens[up])
            up = draft.parents[up]
        expected = fresh_logits(target, prefix + [current] + path)[-1]
        torch.testing.assert_close(rows[Draft.pass_position(node)], expected, atol=ATOL, rtol=0)


@pytest.mark.integration  # the embedded model, twice
@pytest.mark.parametrize("dtype", ["gguf", "fp32"])  # the native backend; torch
def test_a_next_edit_prediction_leaves_the_completions_cache_warm(dtype):
    """A request in the edit cache runs in KV arrays of its own: the completions' prompt is
    still cached afterwards, and each cache's output is what a fresh engine writes."""
    from engine.api import EDIT_CACHE, Request
    from engine.engine import Engine
    from tests.models import SMALL

    engine = Engine.load(SMALL, dtype=dtype, threads=2)
    assert engine.target.capabilities.caches >= 2
    code = stdlib_text("textwrap.py")
    completion, edit = code[:1500], code[3000:4200]
    first = engine.complete(completion, Request(16), "lookup")
    predicted = engine.complete(edit, Request(16, cache=EDIT_CACHE), "lookup")
    again = engine.complete(completion, Request(16), "lookup")
    assert again.tokens == first.tokens
    assert again.stats.new_prompt_tokens <= 1  # only the healed last token is read again
    repeated = engine.complete(edit, Request(16, cache=EDIT_CACHE), "lookup")
    assert repeated.tokens == predicted.tokens and repeated.stats.new_prompt_tokens <= 1
    engine.forget_cache()
    assert engine.complete(edit, Request(16), "lookup").tokens == predicted.tokens


@pytest.mark.integration  # the embedded model
def test_the_last_spots_prompts_stay_cached_each_in_a_completions_cache():
    """Going back to a spot in another file prefills nothing while the backend keeps a
    completions' cache for each of the last spots; a spot past that many takes the cache used
    longest ago; every output is what an engine with an empty cache writes."""
    from engine.api import Request
    from engine.engine import COMPLETION_SLOTS, Engine
    from tests.models import SMALL

    engine = Engine.load(SMALL, dtype="gguf", threads=2)
    code = stdlib_text("textwrap.py")
    spots = [code[i * 2500:i * 2500 + 1200] for i in range(COMPLETION_SLOTS + 1)]  # other files, in effect
    first = [engine.complete(spot, Request(8), "lookup") for spot in spots[:COMPLETION_SLOTS]]
    for spot, written in zip(spots, first):  # back to each: all of it still cached
        again = engine.complete(spot, Request(8), "lookup")
        assert again.tokens == written.tokens and again.stats.new_prompt_tokens <= 1
    assert all(engine.cached_tokens(spot) > 200 for spot in spots[:COMPLETION_SLOTS])
    engine.complete(spots[-1], Request(8), "lookup")  # one more spot: the first goes
    assert engine.cached_tokens(spots[0]) <= 1
    assert all(engine.cached_tokens(spot) > 200 for spot in spots[1:])
    engine.forget_cache()
    assert all(engine.cached_tokens(spot) == 0 for spot in spots)
    assert engine.complete(spots[0], Request(8), "lookup").tokens == first[0].tokens


@pytest.mark.integration  # the embedded model
def test_a_request_goes_on_with_the_prefill_it_cancelled():
    """A prefill cancelled within its first pass (an idle prefill a request cut short) counts
    its part-done tokens as held: the request whose prompt starts with them runs in that cache
    and goes on from the layer the pass reached, the other spot's cache stays as it was, and
    the output is what an engine with an empty cache writes."""
    from engine.api import Request
    from engine.engine import Engine
    from tests.models import SMALL

    engine = Engine.load(SMALL, dtype="gguf", threads=2)
    code = stdlib_text("textwrap.py")
    other, prompt = code[5000:6200], code[:1500]
    engine.complete(other, Request(4), "ar")
    target, cancel = engine.target, threading.Event()
    prefill_pass = target.prefill_pass

    def cancelled_in_flight(tokens, cancel):
        cancel.set()
        return prefill_pass(tokens, cancel)

    target.prefill_pass = cancelled_in_flight
    try:
        engine.prefill(engine.prompt_tokens(code[:3000]), cancel)
    finally:
        del target.prefill_pass
    slot, part_done = target._cache, target.resumable(target._cache)
    assert target.length == 0 and part_done and engine.cached_tokens(prompt) == len(part_done)
    written = engine.complete(prompt, Request(12), "lookup")
    assert target._cache == slot and target.resumable(slot) == []
    assert engine.cached_tokens(other) > 200
    engine.forget_cache()
    assert engine.complete(prompt, Request(12), "lookup").tokens == written.tokens
