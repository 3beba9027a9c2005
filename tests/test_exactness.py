"""Greedy speculative decoding is lossless: every mode gives exactly the autoregressive tokens.

Checked in fp32 (bf16 passes of different widths round differently, see README). The baseline
itself is checked against recomputing the whole sequence without any KV cache.
"""
import pytest
import torch

from engine.api import Request
from engine.draft_length import PassCosts
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
