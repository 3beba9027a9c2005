"""The window of a request at a new spot whose full window would take too long to prefill: within
a token budget, the lines that inform the cursor's line most, in the file's order.

    other files' definitions of the names near it   (the best of the full prompt's, at most a
                                                     third of the budget and HEAD_TOKENS)
    the cursor's line and the lines just above it   (at least four fifths of the rest)
    the header of the scope around the cursor       (a function's signature, continued lines too)
    the first lines after the cursor                (a fifth of the budget, as the full window)

A budget here is what a CPU prefills in a second (50-200 tokens). Spent on the enclosing scopes'
headers and the imports as well, it gave fewer first lines right than the nearest lines did
(docs/context.md, "The cold window"): a model sees a file with gaps, and loses lines above.
A definition from another file is different: a line that calls it is decided by its signature,
which no line of this file shows.

At the next spot below (the user wrote a line and paused again), the same window grows down to
the new cursor (`grown_prompt`): its start is still in the KV cache, so only the new lines and
the suffix are prefilled, where a window chosen afresh would cost the whole budget again.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from engine.tokenization.tokenizer import Tokenizer
from lsp_server.completion.prompt import Block, Cursor, fim_prompt, repo_head, suffix_window

NEAR_SHARE = 0.8  # of the prefix budget, always for the lines just above the cursor
HEADER_SHARE = 0.2  # at most, for the innermost scope's header
SUFFIX_SHARE = 0.2  # of the whole budget, at most, for the lines after the cursor
MAX_HEADER_LINES = 6  # a signature continued over several lines
HEAD_TOKENS = 100  # other files' definitions: a few signatures
HEAD_SHARE = 1 / 3  # of the whole budget, at most, for them
_CLOSER = re.compile(r"[)\]}]")  # a line that closes a scope opens none


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _continued(lines: list[str], start: int) -> list[int]:
    """Line `start` and the lines that continue it while its brackets stay open (a signature over
    several lines)."""
    taken, depth = [], 0
    for i in range(start, min(len(lines), start + MAX_HEADER_LINES)):
        taken.append(i)
        depth += sum(lines[i].count(c) for c in "([{") - sum(lines[i].count(c) for c in ")]}")
        if depth <= 0:
            break
    return taken


def scope_header(lines: list[str], cursor: int) -> list[int]:
    """The header of the innermost scope around line `cursor`: the nearest line above it indented
    less, with its continuation lines; [] at the top level."""
    level = _indent(lines[cursor]) if lines[cursor].strip() else len(lines[cursor])
    if level == 0:
        return []
    for i in range(cursor - 1, -1, -1):
        text = lines[i]
        if text.strip() and _indent(text) < level and not _CLOSER.match(text.lstrip()):
            return _continued(lines, i)
    return []


class _Picker:
    """Lines of the prefix chosen under a token budget."""

    def __init__(self, lines: list[str], tokenizer: Tokenizer, budget: int):
        self.lines, self.tokenizer, self.left = lines, tokenizer, budget
        self.chosen: set[int] = set()

    def cost(self, group: list[int]) -> int:
        return sum(len(self.tokenizer.encode(self.lines[i] + "\n")) for i in group if i not in self.chosen)

    def take(self, group: list[int], allowance: int) -> int:
        """Take `group` whole if it fits both the budget and `allowance`; its cost, or -1."""
        cost = self.cost(group)
        if cost > min(self.left, allowance):
            return -1
        self.chosen.update(group)
        self.left -= cost
        return cost

    def take_upwards(self, start: int, allowance: int) -> None:
        """Lines from `start` upwards while they fit."""
        for i in range(start, -1, -1):
            spent = self.take([i], allowance)
            if spent < 0:
                return
            allowance -= spent


def cold_lines(lines: list[str], tokenizer: Tokenizer, budget: int) -> list[int]:
    """Which of the prefix's `lines` (the last one the cursor's) inform its last line most,
    within `budget` tokens, in the file's order."""
    cursor = len(lines) - 1
    picker = _Picker(lines, tokenizer, budget)
    picker.take([cursor], budget)
    picker.take_upwards(cursor - 1, int(budget * NEAR_SHARE))
    picker.take(scope_header(lines, cursor), int(budget * HEADER_SHARE))
    nearest_gap = max((i for i in range(cursor) if i not in picker.chosen), default=-1)
    picker.take_upwards(nearest_gap, picker.left)
    return sorted(picker.chosen)


def cold_prefix(prefix: str, tokenizer: Tokenizer, budget: int) -> str:
    """The text of `cold_lines`: the prefix's lines that inform the cursor's most."""
    lines = prefix.split("\n")
    return "\n".join(lines[i] for i in cold_lines(lines, tokenizer, budget))


def cold_head(blocks: Sequence[Block], tokenizer: Tokenizer, tokens: int, path: str, repo_name: str) -> list[int]:
    """Other files for a cold window of `tokens` tokens: from the full prompt's `blocks` (best
    file last, its best pieces first), the first lines of the best that fit a third of the
    budget and HEAD_TOKENS, in the repository format; [] for a model without that format."""
    if tokenizer.repo is None or not blocks:
        return []
    allowance = min(HEAD_TOKENS, int(tokens * HEAD_SHARE))
    kept: list[Block] = []
    for block in reversed(blocks):
        lines: list[str] = []
        for line in block.text.split("\n"):
            candidate = [*kept, Block(block.path, "\n".join([*lines, line]))]
            if len(repo_head(tokenizer, candidate[::-1], path, repo_name)) > allowance:
                break
            lines.append(line)
        if lines and "\n".join(lines).strip():
            kept.append(Block(block.path, "\n".join(lines)))
    return repo_head(tokenizer, kept[::-1], path, repo_name) if kept else []


def _prompt(cursor: Cursor, tokenizer: Tokenizer, tokens: int, choose: Callable[[list[str], int], Sequence[int]],
            head: Sequence[int]) -> tuple[str | list[int], tuple[int, ...]]:
    """A prompt of `head` (other files), the prefix's lines that `choose(lines, budget)` picks
    and, with FIM, about a fifth of `tokens` of suffix; and the line numbers it shows."""
    lines = cursor.prefix.split("\n")
    if tokenizer.fim is None:
        shown = choose(lines, tokens)
        return "\n".join(lines[i] for i in shown), tuple(shown)
    suffix = suffix_window(cursor.suffix, tokenizer, int(tokens * SUFFIX_SHARE))
    shown = choose(lines, max(32, tokens - len(head) - len(tokenizer.encode(suffix))))
    return fim_prompt(tokenizer, "\n".join(lines[i] for i in shown), suffix, head), tuple(shown)


def cold_prompt(cursor: Cursor, tokenizer: Tokenizer, tokens: int, head: Sequence[int] = ()
                ) -> tuple[str | list[int], tuple[int, ...]]:
    """The prompt of about `tokens` tokens at `cursor`: FIM where the tokenizer has it, other
    files only as `head` (`cold_head`); and the lines of the prefix it shows (for
    `grown_prompt` at a later spot)."""
    return _prompt(cursor, tokenizer, tokens, lambda lines, budget: cold_lines(lines, tokenizer, budget), head)


def grown_prompt(cursor: Cursor, tokenizer: Tokenizer, tokens: int, shown: tuple[int, ...], head: Sequence[int] = ()
                 ) -> tuple[str | list[int], tuple[int, ...]] | None:
    """The cold window that showed lines `shown` after `head` at an earlier spot, grown down to
    the cursor's line (every line after them), with the suffix at the cursor; None where the
    cursor's line is above the last line it showed (another spot: a window chosen afresh)."""
    line = cursor.prefix.count("\n")
    if not shown or line < shown[-1]:
        return None
    return _prompt(cursor, tokenizer, tokens, lambda lines, budget: [*shown[:-1], *range(shown[-1], line + 1)], head)


def _line_end_at_or_before(tokens: list[int], start: int, cut: int, tokenizer: Tokenizer) -> int:
    """The largest position in [start, cut] after a token that ends a line (start if none)."""
    while cut > start and not tokenizer.decode(tokens[cut - 1:cut]).endswith("\n"):
        cut -= 1
    return cut


def settled_part(tokens: list[int], tokenizer: Tokenizer) -> int:
    """How many of a prompt's first tokens come before the cursor's line (with FIM, of its
    prefix): what typing on that line, and the lines written after it, leave as it is. The
    token that ends the line above is left out: it may hold the cursor line's indentation."""
    fim = tokenizer.fim
    end = tokens.index(fim.suffix) if fim is not None and fim.suffix in tokens else len(tokens)
    while end > 0 and "\n" not in tokenizer.decode(tokens[end - 1:end]):
        end -= 1
    return max(0, end - 1)


def warm_start(full: list[int], cached: int, cursor: Cursor, tokenizer: Tokenizer, tokens: int) -> list[int] | None:
    """A prompt that keeps what the KV cache holds of the `full` FIM prompt (its first `cached`
    tokens: other files, and the prefix window up to the end of a line) and adds what `tokens`
    more tokens of prefill allow: the cold window of the rest of the prefix, and the suffix.

    Prefilling the full prompt in idle time then goes on from where it stopped, whatever the
    requests between asked for, and each request at the spot sees more of the file. None when
    the cache holds none of the full prompt's other files or prefix window."""
    fim = tokenizer.fim
    if fim is None or isinstance(full, str) or fim.prefix not in full or fim.suffix not in full:
        return None
    start, end = full.index(fim.prefix) + 1, full.index(fim.suffix)
    cut = _line_end_at_or_before(full, start, max(start, min(cached, end)), tokenizer)
    if cut == start and (start == 1 or cached < start - 1):  # no line of the window, no other file
        return None
    window = tokenizer.decode(full[start:end])
    kept = tokenizer.decode(full[start:cut])
    if not window.startswith(kept):
        return None
    suffix = suffix_window(cursor.suffix, tokenizer, int(tokens * SUFFIX_SHARE))
    near = cold_prefix(window[len(kept):], tokenizer, max(32, tokens - len(tokenizer.encode(suffix))))
    return [*full[:cut], *tokenizer.encode(near), fim.suffix, *tokenizer.encode(suffix), fim.middle]
