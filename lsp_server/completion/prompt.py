"""Prompt assembly: token-budgeted prefix/suffix windows around the cursor, pieces of other
files (similar chunks of open documents; lsp_server/completion/repo_context.py chooses more), and a
fill-in-the-middle template when the model has FIM tokens; other files in the model's
repository format when it has one (Qwen2.5-Coder's `<|repo_name|>`/`<|file_sep|>`), else as
`# path` comments.

Other files come first and the cursor's window last, and the prefix window starts at a line
boundary chosen in coarse steps, so consecutive keystrokes share the prompt's start and the
engine reuses its KV cache."""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from engine.tokenization.tokenizer import Tokenizer

WINDOW_STEP_LINES = 16  # the prefix start moves in steps of this many lines
SNIPPET_LINES = 12  # chunk size for snippets from other documents
_WORD = re.compile(r"\w+")


@dataclass(frozen=True)
class Budget:
    prefix_tokens: int = 1024
    suffix_tokens: int = 256
    snippet_tokens: int = 384  # similar chunks of open documents, without repository context
    repo_tokens: int = 512  # repository context (definitions, edits, similar chunks)
    min_context_for_snippets: int = 2048  # models with less context get no other files


class Block(NamedTuple):
    """A piece of another file for the prompt."""
    path: str  # relative to the workspace's root
    text: str


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
                     min_similarity: float = 0.1) -> list[Block]:
    """The chunks of the other documents most similar (Jaccard over words) to the text
    around the cursor, best first."""
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
    picked: list[Block] = []
    for _, name, chunk in scored:
        if all(name != n for n, _ in picked):  # one chunk per document
            picked.append(Block(name, chunk))
        if len(picked) == limit:
            break
    return picked


def fit(blocks: Sequence[Block], tokenizer: Tokenizer, budget: int) -> list[Block]:
    """The blocks (best first) that fit `budget` tokens together, one file's pieces merged into
    one block; the best file comes last, next to the cursor's own."""
    kept: dict[str, list[str]] = {}
    used = 0
    for path, text in blocks:
        cost = len(tokenizer.encode(f"{path}\n{text}\n")) + 1  # + the separator
        if used + cost <= budget:
            used += cost
            kept.setdefault(path, []).append(text.strip("\n"))
    return [Block(path, "\n".join(texts)) for path, texts in reversed(kept.items())]


def neighbourhood(cursor: Cursor, lines: int = 8) -> str:
    """Lines around the cursor, without the cursor's line: stable while typing on a line."""
    before = cursor.prefix.split("\n")[:-1][-lines:]
    return "\n".join(before + cursor.following_lines(lines // 2))


def build_prompt(cursor: Cursor, tokenizer: Tokenizer, max_len: int, blocks: Sequence[Block] = (),
                 budget: Budget = Budget(), path: str = "", repo_name: str = "") -> str | list[int]:
    """The model's prompt for the document `path` of the repository `repo_name`: token ids with
    a FIM template when the tokenizer has FIM tokens, else the plain prefix text; the other
    files' `blocks` first."""
    prefix = prefix_window(cursor.prefix, tokenizer, budget.prefix_tokens)
    if max_len < budget.min_context_for_snippets:
        blocks = ()
    if tokenizer.fim is None:
        return comment_header(blocks) + prefix
    suffix = suffix_window(cursor.suffix, tokenizer, budget.suffix_tokens)
    if tokenizer.repo is None or not blocks:
        return fim_prompt(tokenizer, comment_header(blocks) + prefix, suffix)
    return fim_prompt(tokenizer, prefix, suffix, repo_head(tokenizer, blocks, path, repo_name))


def comment_header(blocks: Sequence[Block]) -> str:
    """Other files as `# path` headed blocks, for models without a repository format."""
    return "".join(f"# {path}\n{text.strip()}\n\n" for path, text in blocks)


def repo_head(tokenizer: Tokenizer, blocks: Sequence[Block], path: str, repo_name: str) -> list[int]:
    """Qwen2.5-Coder's repository format up to the current file's FIM part:
    `<|repo_name|>name\n<|file_sep|>path\ntext\n...<|file_sep|>current path\n`."""
    repo = tokenizer.repo
    ids = [repo.name, *tokenizer.encode(f"{repo_name}\n")]
    for other, text in blocks:
        ids += [repo.file_sep, *tokenizer.encode(f"{other}\n{text.strip()}\n")]
    return ids + [repo.file_sep, *tokenizer.encode(f"{path}\n")]


def fim_prompt(tokenizer: Tokenizer, before: str, after: str, head: Sequence[int] = ()) -> list[int]:
    """The fill-in-the-middle template (prefix-suffix-middle order) for a tokenizer with FIM
    tokens: the model writes what goes between `before` and `after`; `head` (other files)
    goes first."""
    fim = tokenizer.fim
    return tokenizer.with_bos([*head, fim.prefix, *tokenizer.encode(before), fim.suffix, *tokenizer.encode(after),
                               fim.middle])
