"""Prompt assembly: token-budgeted prefix/suffix windows around the cursor, snippets from
other open documents, and a fill-in-the-middle template when the model has FIM tokens.

The prefix window starts at a line boundary chosen in coarse steps, so consecutive
keystrokes share the prompt's start and the engine reuses its KV cache."""
from __future__ import annotations

import re
from dataclasses import dataclass

from engine.tokenization.tokenizer import Tokenizer

WINDOW_STEP_LINES = 16  # the prefix start moves in steps of this many lines
SNIPPET_LINES = 12  # chunk size for snippets from other documents
_WORD = re.compile(r"\w+")


@dataclass(frozen=True)
class Budget:
    prefix_tokens: int = 1024
    suffix_tokens: int = 256
    snippet_tokens: int = 384
    min_context_for_snippets: int = 2048  # models with less context get no snippets


@dataclass(frozen=True)
class Cursor:
    """The document split at the cursor."""
    prefix: str  # all text before the cursor
    suffix: str  # all text after it

    @property
    def line_before(self) -> str:
        return self.prefix[self.prefix.rfind("\n") + 1:]

    @property
    def line_after(self) -> str:
        end = self.suffix.find("\n")
        return self.suffix if end < 0 else self.suffix[:end]

    def following_lines(self, n: int = 3) -> list[str]:
        return self.suffix.split("\n")[1:1 + n]


def prefix_window(prefix: str, tokenizer: Tokenizer, budget: int) -> str:
    """The tail of `prefix` that fits `budget` tokens, starting at a line that is a multiple
    of WINDOW_STEP_LINES (so it only moves when the cursor crosses such a boundary)."""
    lines = prefix.split("\n")
    start = (len(lines) - 1) // WINDOW_STEP_LINES * WINDOW_STEP_LINES
    while start > 0:
        candidate = max(0, start - WINDOW_STEP_LINES)
        if len(tokenizer.encode("\n".join(lines[candidate:]))) > budget:
            break
        start = candidate
    window = "\n".join(lines[start:])
    # One oversized block: keep its tail, still cut at a line boundary where possible.
    while len(tokenizer.encode(window)) > budget and "\n" in window:
        window = window[window.index("\n") + 1:]
    return window


def suffix_window(suffix: str, tokenizer: Tokenizer, budget: int) -> str:
    lines, kept = suffix.split("\n"), []
    for line in lines:
        kept.append(line)
        if len(tokenizer.encode("\n".join(kept))) > budget:
            kept.pop()
            break
    return "\n".join(kept)


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text))


def _jaccard(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b) if a and b else 0.0


def similar_snippets(neighbourhood: str, others: dict[str, str], limit: int = 2,
                     min_similarity: float = 0.1) -> list[tuple[str, str]]:
    """The chunks of the other documents most similar (Jaccard over words) to the text
    around the cursor, best first, as (name, chunk)."""
    near = _words(neighbourhood)
    scored = []
    for name, text in others.items():
        lines = text.split("\n")
        for i in range(0, len(lines), SNIPPET_LINES // 2):  # half-overlapping chunks
            chunk = "\n".join(lines[i:i + SNIPPET_LINES])
            score = _jaccard(near, _words(chunk))
            if score >= min_similarity:
                scored.append((score, name, chunk))
    scored.sort(key=lambda s: -s[0])
    picked: list[tuple[str, str]] = []
    for _, name, chunk in scored:
        if all(name != n for n, _ in picked):  # one chunk per document
            picked.append((name, chunk))
        if len(picked) == limit:
            break
    return picked


def snippet_header(snippets: list[tuple[str, str]], tokenizer: Tokenizer, budget: int) -> str:
    """Snippets as `# path` headed blocks that fit `budget` tokens."""
    out = ""
    for name, chunk in snippets:
        block = f"# {name}\n{chunk.strip()}\n\n"
        if len(tokenizer.encode(out + block)) > budget:
            break
        out += block
    return out


def snippets(cursor: Cursor, others: dict[str, str], tokenizer: Tokenizer, budget: Budget = Budget()) -> str:
    """The prompt's header of chunks from `others` ({name: text}) similar to the cursor's
    surroundings."""
    picked = similar_snippets(neighbourhood(cursor), others)
    return snippet_header(picked, tokenizer, budget.snippet_tokens) if picked else ""


def neighbourhood(cursor: Cursor, lines: int = 8) -> str:
    """Lines around the cursor, without the cursor's line: stable while typing on a line."""
    before = cursor.prefix.split("\n")[:-1][-lines:]
    return "\n".join(before + cursor.following_lines(lines // 2))


def build_prompt(cursor: Cursor, tokenizer: Tokenizer, max_len: int, snippets: str = "",
                 budget: Budget = Budget()) -> str | list[int]:
    """The model's prompt: token ids with a FIM template when the tokenizer has FIM tokens,
    else the plain prefix text (snippets first)."""
    prefix = prefix_window(cursor.prefix, tokenizer, budget.prefix_tokens)
    if max_len < budget.min_context_for_snippets:
        snippets = ""
    if tokenizer.fim is None:
        return snippets + prefix
    return fim_prompt(tokenizer, snippets + prefix, suffix_window(cursor.suffix, tokenizer, budget.suffix_tokens))


def fim_prompt(tokenizer: Tokenizer, before: str, after: str) -> list[int]:
    """The fill-in-the-middle template (prefix-suffix-middle order) for a tokenizer with FIM
    tokens: the model writes what goes between `before` and `after`."""
    fim = tokenizer.fim
    return tokenizer.with_bos([fim.prefix, *tokenizer.encode(before), fim.suffix, *tokenizer.encode(after),
                               fim.middle])
