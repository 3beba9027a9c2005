"""The torch backend's static-cache passes (engine/execution/static_passes.py), on the CPU.

On CUDA they run as captured graphs; here the same path runs uncaptured: at each pass's own
width; bucketed as the graphs run (padded to a bucket, through static input buffers written in
place); and captured by the capture code with its CPU stand-in for CUDA graphs (warm-ups on an
idle pass, replays into the output buffer the capture returned). Each must compute what the
dynamic path computes, and every decoding mode on them must write what plain decoding writes,
rollback after rejected drafts included (fp32)."""
from __future__ import annotations

import dataclasses
import logging

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import models

from engine.api import Request
from engine.engine import Engine, pair_draft
from engine.errors import EngineError
from engine.execution.backends.torch_llama import TorchLlama
from engine.execution.static_passes import PASS_WIDTHS, StaticCache, cache_positions
from engine.loading.weights import LoadedWeights
from engine.tokenization.tokenizer import Tokenizer
from tests.tiny_models import random_feature_draft, random_weights

VOCAB = 16
# the dynamic path; static at each pass's width; in the graphs' buckets; captured (the CPU stand-in)
PATHS = {"dynamic": False, "static": StaticCache(widths=()), "bucketed": StaticCache(),
         "captured": StaticCache(stand_in=True)}
STATIC = ["static", "bucketed", "captured"]
# Decoding in every mode takes seconds per static path: the captured one (buckets on a static
# cache, replayed) stays in the unit tier, the other two run in `make test`.
DECODING_PATHS = [pytest.param(p, marks=pytest.mark.integration) for p in STATIC[:-1]] + STATIC[-1:]


def tiny(seed: int, path: str, max_len: int = 256) -> TorchLlama:
    return TorchLlama(random_weights(seed, vocab=VOCAB), torch.float32, max_len=max_len, static=PATHS[path])


def words() -> Tokenizer:
    return Tokenizer(HFTokenizer(models.WordLevel({f"w{i}": i for i in range(VOCAB)}, unk_token="w0")), set())


def test_the_widest_bucket_is_the_widest_verification_pass():
    assert max(PASS_WIDTHS) == Engine.MAX_NODES + 1


@pytest.mark.parametrize("path", STATIC)
def test_static_passes_compute_what_dynamic_ones_do(path):
    """Chains, a token tree, and passes after a rollback and after keeping a tree path. Each
    bucket is made (captured) at its first pass, with the cache already holding tokens."""
    want, got = tiny(1, "dynamic"), tiny(1, path)
    tokens = np.random.default_rng(0).integers(0, VOCAB, 60).tolist()
    tree = [-1, 0, 0, 1, 2, 2]

    def both(call):
        a, b = call(want), call(got)
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5)
        assert (a.argmax(-1) == b.argmax(-1)).all()

    both(lambda m: m.forward(tokens[:40]))  # a prefill chunk wider than every bucket
    both(lambda m: m.forward(tokens[40:41]))
    both(lambda m: m.forward(tokens[41:44]))  # 3 tokens, padded to 4
    for m in (want, got):
        m.truncate(35)  # roll back: rows 35..43 are stale now
    both(lambda m: m.forward(tokens[50:56], tree))
    for m in (want, got):
        m.keep(35, [0, 2, 5])  # the path 0 -> 2 -> 5 of the tree, moved together
    both(lambda m: m.forward(tokens[56:60]))
    assert want.tokens == got.tokens


def test_bucketed_passes_reuse_their_static_buffers():
    """A pass of n tokens runs in the narrowest bucket that holds it, its inputs copied into
    the bucket's own buffers; a pass wider than every bucket makes none."""
    model = tiny(2, "bucketed")
    graphs = model.graphs
    assert [graphs.bucket(n) for n in (1, 2, 3, 5, 16, 17, 33, 34)] == [1, 2, 4, 8, 16, 33, 33, None]
    model.forward([1] * 40, logits=False)
    assert graphs._buckets == {}
    model.forward([3, 4, 5])
    bucket = graphs._buckets[(0, 4)]
    address = bucket.inputs.packed.data_ptr()
    assert bucket.inputs.ids.tolist() == [3, 4, 5, 0]  # padded
    assert bucket.inputs.start.item() == 40
    model.forward([6, 7])
    model.forward([8, 9, 10])
    assert bucket.inputs.packed.data_ptr() == address
    assert bucket.inputs.ids.tolist() == [8, 9, 10, 0] and bucket.inputs.start.item() == 45
    assert bucket.inputs.local.tolist() == [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [0, 0, 0, 1]]
    assert set(graphs._buckets) == {(0, 2), (0, 4)} and graphs.captured == 0
    out = model.forward([11, 12, 13])
    again = tiny(2, "static")  # the same passes, unpadded: what the bucket's rows must be
    again.forward([1] * 40 + list(range(3, 11)), logits=False)
    np.testing.assert_allclose(out, again.forward([11, 12, 13]), rtol=1e-5, atol=1e-5)
    model.use_cache(1)  # another cache: buckets of its own
    model.forward([1, 2, 3])
    assert (1, 4) in graphs._buckets
    model.limit_vocab(VOCAB - 2)  # the head moved: every bucket is made again
    assert graphs._buckets == {}


def test_captured_passes_replay_into_their_own_buffer():
    """A captured bucket's logits are a copy of its output buffer, which its next replay
    refills: logits a caller holds do not change under it."""
    model = tiny(3, "captured")
    model.forward([1] * 40, logits=False)  # wider than every bucket: none made
    first = model.score([6]).rows
    held = first.clone()
    model.forward([7])
    assert model.graphs.captured == 1
    assert torch.equal(first, held)


class _CannotCapture:
    """A driver that refuses graph capture (as an old one may)."""

    def capture(self, run):
        raise RuntimeError("operation not permitted when stream is capturing")


def test_a_capture_that_fails_runs_the_same_passes_uncaptured_and_says_so_once(caplog):
    captured, failing = tiny(3, "captured"), tiny(3, "captured")
    failing.graphs.graphs = _CannotCapture()
    with caplog.at_level(logging.WARNING):
        for model in (captured, failing):
            model.forward([1, 2, 3])
        rows = [model.score([5, 6]).rows for model in (captured, failing)]
    assert torch.equal(rows[0], rows[1])
    assert failing.graphs.graphs is None and failing.graphs.captured == 0 and captured.graphs.captured > 0
    assert [r.message for r in caplog.records].count(
        "CUDA graph capture failed (operation not permitted when stream is capturing): "
        "running the static passes uncaptured") == 1


def _engine(path: str) -> Engine:
    target, draft = tiny(1, path), tiny(2, path)
    tok = words()
    # cheap drafts and flat passes: the policy drafts deep, so many drafts are rejected
    return Engine(target, tok, pair_draft(target, tok, draft, tok), pass_cost=[0.0] + [1.0] * 40, draft_cost=0.01)


@pytest.mark.parametrize("path", DECODING_PATHS)
def test_every_mode_writes_what_plain_decoding_writes(path):
    """Each mode on static passes (target and draft) against plain decoding on dynamic ones,
    with lookup drafting from the greedy output itself (drafts right), a copy changed every
    fifth token (drafts rejected, the cache rolled back) and nothing."""
    plain, engine = _engine("dynamic"), _engine(path)
    request = Request(max_new_tokens=24)
    rejected = accepted = 0
    for seed in range(4):
        prompt = np.random.default_rng(seed).integers(0, VOCAB, 12).tolist() * 2
        greedy = plain.complete(prompt, request, "ar").tokens
        assert engine.complete(prompt, request, "ar").tokens == greedy
        changed = [(t + 1) % VOCAB if i % 5 == 4 else t for i, t in enumerate(greedy)]
        for document in (greedy, changed, None):
            if document is not None:
                engine.lookup.set_document("seen", prompt + document)
            for mode in ("lookup", "draft", "hybrid"):
                out = engine.complete(prompt, request, mode)
                assert out.tokens == greedy, (seed, mode)
                rejected += out.stats.drafted - out.stats.accepted
                accepted += out.stats.accepted
            engine.lookup.remove_document("seen")
    assert rejected > 0 and accepted > 0


@pytest.mark.parametrize("path", DECODING_PATHS)
def test_a_feature_draft_reads_the_states_static_passes_record(path):
    """A draft reading the target's own features (EAGLE): the static passes record each
    position's final state as the dynamic ones do, and its modes write plain decoding's tokens."""
    tok, request = words(), Request(max_new_tokens=20)
    targets = [tiny(1, p) for p in ("dynamic", path)]
    plain, static = (Engine(t, tok, random_feature_draft(t, 5), pass_cost=[0.0] + [1.0] * 40, draft_cost=0.01)
                     for t in targets)
    for seed in range(3):
        prompt = np.random.default_rng(seed).integers(0, VOCAB, 10).tolist() * 2
        greedy = plain.complete(prompt, request, "ar").tokens
        for mode in ("draft", "hybrid"):
            assert static.complete(prompt, request, mode).tokens == greedy, (seed, mode)
        n = static.target.length
        np.testing.assert_allclose(static.target.features[:n], plain.target.features[:n], rtol=1e-5, atol=1e-5)


def test_a_cache_that_does_not_fit_is_smaller_and_said_in_one_line(caplog):
    weights = random_weights(3, vocab=VOCAB)
    weights = LoadedWeights(dataclasses.replace(weights.config, max_position=4096), weights.tensors, None)
    # 2 caches x keys and values x 2 layers x 2 KV heads x 8 dims x 4 bytes a position
    per_position = 2 * 2 * 2 * 2 * 8 * 4
    slack = max(PASS_WIDTHS)
    free = 2 * (512 + slack) * per_position  # the caches may take half
    with caplog.at_level(logging.INFO, logger="draftline"):
        model = TorchLlama(weights, torch.float32, max_len=1024, static=StaticCache(free_bytes=free))
    assert model.max_len == 512
    assert model.k_cache.shape[2] == 512 + slack
    lines = [r for r in caplog.records if "static KV cache" in r.getMessage()]
    assert len(lines) == 1 and "512 positions" in lines[0].getMessage() and "1024" in lines[0].getMessage()
    model.forward(list(range(VOCAB)) * 32, logits=False)  # 512 tokens: full
    with pytest.raises(EngineError, match="context full"):
        model.forward([1])
    roomy = TorchLlama(weights, torch.float32, max_len=1024, static=StaticCache(free_bytes=100 * free))
    assert roomy.max_len == 1024
    with pytest.raises(EngineError, match="static KV cache of 256 positions"):
        cache_positions(1024, per_position, free // 4, slack)


@pytest.mark.integration  # the embedded model, dequantized to fp32 twice
def test_the_embedded_model_on_a_static_cache_writes_what_plain_decoding_writes():
    """Real weights and vocabulary: lookup and hybrid on bucketed static passes equal plain
    decoding on dynamic ones, on code prompts with open files to draft from."""
    from engine.loading.fetch import model_path
    from engine.loading.formats.load import load_weights
    from engine.tokenization import load_tokenizer
    from tests.code_samples import FILES, code_prompts, stdlib_text
    from tests.models import SMALL

    path = model_path(SMALL)
    tok = load_tokenizer(path)
    engines = [Engine(TorchLlama(load_weights(path), torch.float32, max_len=2048, static=static), tok)
               for static in (False, StaticCache())]
    for engine in engines:
        engine.target.limit_vocab(min(tok.vocab_size, tok.tokens_in_use))
        for name in FILES[:4]:
            engine.set_document(name, stdlib_text(name))
    plain, static = engines
    request = Request(max_new_tokens=24)
    accepted = 0
    for _, prompt in code_prompts(4):
        greedy = plain.complete(prompt, request, "ar").tokens
        assert static.complete(prompt, request, "ar").tokens == greedy
        for mode in ("lookup", "hybrid"):
            out = static.complete(prompt, request, mode)
            assert out.tokens == greedy, mode
            accepted += out.stats.accepted
    assert accepted > 0
