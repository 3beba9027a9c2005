"""Greedy speculative decoding is lossless: every mode gives exactly the autoregressive tokens.

Checked in fp32 (bf16 passes of different widths round differently, see docs/engine.md).
The baseline itself is checked against recomputing the whole sequence without any KV cache.
"""
import pytest
import torch

from engine import decoding
from engine.api import Request
from engine.draft_length import PassCosts
from engine.drafters.base import Draft
from tests.code_samples import FILES, code_prompts, stdlib_text

PROMPTS = code_prompts(20)
REQUEST = Request(max_new_tokens=24)


@pytest.fixture(scope="module")
def engine(fp32_engine):
    for name in FILES[:6]:  # other "open files" for the lookup index
        fp32_engine.set_document(name, stdlib_text(name))
    return fp32_engine


@pytest.mark.parametrize("name,prompt", PROMPTS, ids=[f"{i}-{n}" for i, (n, _) in enumerate(PROMPTS)])
def test_speculative_modes_equal_autoregressive(engine, name, prompt):
    baseline = engine.complete(prompt, REQUEST, "ar")
    assert baseline.stats.target_passes == baseline.stats.new_tokens
    for mode in ("lookup", "draft", "hybrid"):
        result = engine.complete(prompt, REQUEST, mode)
        assert result.tokens == baseline.tokens, mode
        assert result.text == baseline.text


def test_lookup_saves_passes_on_repeated_code(engine, monkeypatch):
    """The text of an indexed document repeats: lookup must need fewer target passes. (With a
    flat pass-cost curve, as on a GPU: the measured one makes k depend on this machine's load.)"""
    monkeypatch.setattr(engine, "costs", PassCosts())
    text = stdlib_text("textwrap.py")
    prompt = text[:text.index("    def _split(self, text):")] + text[:200]  # a second copy begins
    result = engine.complete(prompt, Request(max_new_tokens=24, heal=False), "lookup")
    baseline = engine.complete(prompt, Request(max_new_tokens=24, heal=False), "ar")
    assert result.tokens == baseline.tokens
    assert result.stats.target_passes < baseline.stats.target_passes / 2


def test_cached_decoding_equals_full_recomputation(engine):
    """The autoregressive baseline against an independent route: no KV cache at all."""
    target, tokenizer = engine.target, engine.tokenizer
    for _, prompt in PROMPTS[:2]:
        tokens = tokenizer.encode(prompt)[-200:]
        expected = []
        for _ in range(8):
            target.truncate(0)
            logits = target.forward(tokens + expected)[-1]
            expected.append(int(logits.argmax()))
        result = engine.complete(tokens, Request(max_new_tokens=8), "ar")
        assert result.tokens == expected


def _single_line(text: str) -> int | None:
    return text.find("\n") if "\n" in text else None


def test_a_draft_keeps_only_nodes_the_output_can_reach(engine):
    """Nodes after a token at which the output would stop (a single-line suggestion's newline)
    are dropped before the verification pass; the rest of the tree stays as it was."""
    encode, decode = engine.tokenizer.encode, engine.tokenizer.decode
    out = decoding._Output(Request(max_new_tokens=64, stop=_single_line), engine.vocabulary, "")
    out.commit(encode("value = compute("))
    chain, other = encode("a, b)\n    return value"), encode("x, y")
    newline_at = next(i for i in range(len(chain)) if "\n" in decode(chain[:i + 1]))
    assert newline_at < len(chain) - 1  # the chain goes on past its newline
    n = len(chain)
    draft = Draft(chain + other, list(range(-1, n - 1)) + [-1] + list(range(n, n + len(other) - 1)))
    kept = decoding._reachable(draft, out)
    assert kept.tokens == chain[:newline_at + 1] + other
    assert kept.parents == list(range(-1, newline_at)) + [-1] + list(range(newline_at + 1, newline_at + len(other)))


def test_lookup_with_a_stop_rule_verifies_fewer_tokens_and_writes_the_same(engine, monkeypatch):
    """Single-line requests on repeated code: lookup's matches run on into the next line. The
    pruned verification passes must be narrower in all, and the output still plain decoding's."""
    monkeypatch.setattr(engine, "costs", PassCosts())  # long drafts, as on a GPU
    text = stdlib_text("textwrap.py")
    cut = text.index("    def _split(self, text):")
    verified = []  # tokens fed to lookup's verification passes (not the prefill's)
    score = engine.target.score

    def counting(tokens, *args, **kwargs):
        verified.append(len(tokens))
        return score(tokens, *args, **kwargs)

    totals = []
    for prune in (True, False):
        if not prune:
            monkeypatch.setattr(decoding, "_reachable", lambda draft, out: draft)
        verified.clear()
        for at in (200, 900, 1500):  # a second copy of the file begins: the lines repeat
            prompt = text[:cut] + text[:text.index("\n", at) + 1]
            request = Request(max_new_tokens=24, heal=False, stop=_single_line)
            expected = engine.complete(prompt, request, "ar").tokens
            monkeypatch.setattr(engine.target, "score", counting)
            assert engine.complete(prompt, request, "lookup").tokens == expected
            monkeypatch.setattr(engine.target, "score", score)
        totals.append(sum(verified))
    assert totals[0] < totals[1]
