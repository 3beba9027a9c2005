"""Where the next edit is due: the places in a document where the old form of the user's last
edit still stands, nearest first (below the cursor before above).

    an edit's lines before and after -> their tokens, and the span of tokens that changed
      -> a pattern: the changed span of the old lines with two tokens of context either side,
         names abstracted (one name, one group: `for x in ...: yield x` binds x twice) but
         keywords, builtins and the names the change replaced by others (the changed tokens:
         a rename, a new call), which are kept as they are
      -> one regular expression, searched over the whole text (C speed: a 3,000-line file takes
         a few milliseconds, `bench` measures it), plus, for a rename, the old names themselves
      -> the lines it matches, but those the recent edits made (changed already)
      -> where no edit's form stands anywhere, a loose one: the changed span alone, strings it
         leaves alone any string (the same change in other text)

No model pass: this only picks the window the model rewrites (lsp_server/next_edit/rewrite.py).
A pattern that also matches the edit's new lines finds nothing: it cannot tell old from new.
"""
from __future__ import annotations

import bisect
import builtins
import difflib
import keyword
import re
from dataclasses import dataclass

from lsp_server.next_edit.history import Edit

# Strings on one line (with their prefix: u'', f""), identifiers, numbers, then any other
# character that is not a space.
_STRING = r"""[rRbBuUfF]{0,2}(?:"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*')"""
_TOKEN = re.compile(_STRING + r"""|[A-Za-z_]\w*|\d[\w.]*|\S""")
_IS_STRING = re.compile(_STRING)
_NAME = re.compile(r"[A-Za-z_]\w*")
_WORD = re.compile(r"\w+")
_ANY_STRING = ""  # in _regex's `strings`: any string on one line stands in
# Names that mean the same in every place: kept as they are, never abstracted.
FIXED = frozenset(keyword.kwlist) | frozenset(keyword.softkwlist) | frozenset(dir(builtins)) | {"self", "cls"}
CONTEXT = 2  # tokens of context either side of the changed span
WEAK_CONTEXT = 3  # the same, where the span holds no name, builtin or string kept as it is
MAX_PLACES = 32  # the nearest ones are all a request uses
# Pieces that match any text on a line (strings changed inside, unchanged runs between changes)
# a pattern may hold: each one more makes the search slower by up to the line's length.
MAX_WILDCARDS = 2


@dataclass(frozen=True)
class Token:
    text: str
    start: int  # offset in its text
    end: int


def tokens(text: str) -> list[Token]:
    return [Token(m.group(), m.start(), m.end()) for m in _TOKEN.finditer(text)]


@dataclass(frozen=True)
class Pattern:
    """The old form of an edit, as a regular expression, and the names it renamed."""
    regex: re.Pattern
    renamed: tuple[str, ...]  # old names an identifier-for-identifier change replaced
    line: int = 0  # the line of the edit's old lines where the regular expression starts


def pattern_of(edit: Edit, loose: bool = False) -> Pattern | None:
    """The old form of `edit`, or None when no change is left to find (a change of spaces, one
    whose old form its new lines hold too, or a word typed on at the end of its line). `loose`:
    the changed span alone, with no context and the strings it leaves alone any string (where
    that sprawls, its first change alone), for where the whole form stands nowhere: the same
    change in other text (`set(['a', 'b'])` after `x = set(['a'])`, `re.escape(...)` dropped in
    another call)."""
    if _typing_on(edit):
        return None
    old, new = tokens(edit.before), tokens(edit.after)
    b = [t.text for t in new]
    changes = [op for op in difflib.SequenceMatcher(None, [t.text for t in old], b, autojunk=False).get_opcodes()
               if op[0] != "equal"]
    if not changes:
        return None
    if not loose:
        return _pattern(edit, old, b, changes, loose)
    return _pattern(edit, old, b, changes, loose) or _pattern(edit, old, b, changes[:1], loose)


def _pattern(edit: Edit, old: list[Token], b: list[str], changes: list[tuple], loose: bool) -> Pattern | None:
    """pattern_of's form for these `changes` of the old tokens into `b`."""
    a = [t.text for t in old]
    first, last = changes[0][1], changes[-1][2]  # the changed span of the old tokens
    # Names replaced by other names are what the change is about (a rename, a new call): kept.
    # Names deleted, or replaced by keywords, differ from place to place (`super(Foo, self)`),
    # unless nothing else would pin the change down (a decorator removed).
    literal = {a[i] for tag, i1, i2, j1, j2 in changes if tag == "replace" and any(_named(t) for t in b[j1:j2])
               for i in range(i1, i2) if _free(a[i])}
    pairs = [(i, j) for tag, i1, i2, j1, j2 in changes if tag == "replace" and i2 - i1 == j2 - j1
             for i, j in zip(range(i1, i2), range(j1, j2))]
    renamed = [a[i] for i, j in pairs if _free(a[i]) and _named(b[j])]
    strings = {i: b[j] for i, j in pairs if _IS_STRING.fullmatch(a[i]) and _IS_STRING.fullmatch(b[j])}
    if not any(_anchors(a[i], literal) for i in range(first, last)):
        literal |= {a[i] for i in range(first, last) if _free(a[i])}
    strong = any(_anchors(a[i], literal) for i in range(first, last))
    if loose and not strong:
        return None  # without context, only a change that pins itself down
    # A span of punctuation and numbers says little: more context, kept as it is.
    reach = 0 if loose else CONTEXT if strong else WEAK_CONTEXT
    lo, hi = max(0, first - reach), min(len(a), last + reach)
    if not strong:
        literal |= {t for t in a[lo:first] + a[last:hi] if _free(t)}
    if not any(_anchors(t, literal) for t in a[lo:hi]):
        return None
    inner = _inner_runs(changes, a)
    if len(strings) + len({i for i in inner if i - 1 not in inner}) > MAX_WILDCARDS:
        return None  # a sprawling change: no pattern, and each wildcard multiplies the search
    unchanged = {i: _ANY_STRING for i in range(lo, hi) if loose and i not in strings and _IS_STRING.fullmatch(a[i])}
    compiled = re.compile(_regex(edit.before, old[lo:hi], lo, literal, inner, strings | unchanged))
    if compiled.search(edit.after):
        return None
    return Pattern(compiled, tuple(dict.fromkeys(renamed)), edit.before.count("\n", 0, old[lo].start))


def _typing_on(edit: Edit) -> bool:
    """The last word of a line lengthened at its end (`if c` became `if chu`): a word being
    typed, whose first letters are no name to replace elsewhere."""
    typed = edit.after[len(edit.before):]
    return edit.after.startswith(edit.before) and bool(_WORD.fullmatch(edit.before[-1:])) and bool(_WORD.fullmatch(typed))


def _named(token: str) -> bool:
    """A name, of the user's code or a builtin, not a keyword."""
    return _NAME.fullmatch(token) is not None and not keyword.iskeyword(token)


def _free(token: str) -> bool:
    """A name of the user's code (not a keyword, builtin, self or cls)."""
    return _NAME.fullmatch(token) is not None and token not in FIXED


def _anchors(token: str, literal: set[str]) -> bool:
    """A token that pins a place down: a name kept as it is, a builtin, a string."""
    if _NAME.fullmatch(token):
        return token in literal or (token in FIXED and not keyword.iskeyword(token))
    return _IS_STRING.fullmatch(token) is not None


def _string_piece(old: str, new: str) -> str:
    """A string changed inside: any string on the line that holds its first change, with a
    character either side (`'{0}: x'` -> `'{}: x'`: `{0}`), or, where the change is at its
    start (a prefix dropped: `u'x'` -> `'x'`), any string that starts the same."""
    _, a1, a2, _, _ = next(op for op in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes()
                           if op[0] != "equal")
    quote = min(i for i in (old.find("'"), old.find('"')) if i >= 0)
    if a1 < quote:  # the prefix: either quote
        return r"(?<![\w'\"])" + re.escape(old[:quote]) + r"""['"][^\n]*?"""
    if a1 == quote:  # the quote itself
        return r"(?<![\w'\"])" + re.escape(old[:quote + 1]) + r"[^\n]*?"
    return r"""[rRbBuUfF]{0,2}['"][^\n]*?""" + re.escape(old[a1 - 1:a2 + 1]) + r"[^\n]*?"


def _inner_runs(changes: list[tuple], a: list[str]) -> set[int]:
    """Old-token indices of unchanged runs between two changes that hold a name: they differ
    from place to place (`for x in f(a): yield x`: `f(a)`), so any text stands in."""
    inner = set()
    for (_, _, end, _, _), (_, start, _, _, _) in zip(changes, changes[1:]):
        if any(_NAME.fullmatch(t) for t in a[end:start]):
            inner |= set(range(end, start))
    return inner


def _regex(text: str, span: list[Token], offset: int, literal: set[str], inner: set[int],
           strings: dict[int, str]) -> str:
    """`span` (tokens of `text`, the first one old token `offset`) as a regular expression:
    spaces between tokens where the text has them on one line, any space where a line ends;
    the strings changed inside (old token index -> new string) as _string_piece has them."""
    out, groups = [], {}
    previous: Token | None = None
    for k, token in enumerate(span):
        between = "" if previous is None else text[previous.end:token.start]
        gap = "" if previous is None else (r"\s*" if "\n" in between else r"[ \t]*")
        if offset + k in inner:
            if offset + k - 1 not in inner:  # the run's first token: any text, across its line ends
                last = k
                while last + 1 < len(span) and offset + last + 1 in inner:
                    last += 1
                lines = text.count("\n", token.start, span[last].end)
                out.append(gap + (r"(?:[^\n]*\n){%d}" % lines if lines else "") + r"[^\n]*?")
            previous = token
            continue
        if strings.get(offset + k) == _ANY_STRING:
            piece = _STRING
        elif offset + k in strings:
            piece = _string_piece(token.text, strings[offset + k])
        elif _free(token.text) and token.text not in literal:
            if token.text in groups:
                piece = rf"\b(?P={groups[token.text]})\b"
            else:
                groups[token.text] = f"n{len(groups)}"
                piece = rf"\b(?P<{groups[token.text]}>[A-Za-z_]\w*)\b"
        elif token.text[0].isalnum() or token.text[0] == "_":
            piece = rf"\b{re.escape(token.text)}\b"
        else:
            piece = re.escape(token.text)
        out.append(gap + piece)
        previous = token
    return "".join(out).removeprefix(r"[^\n]*?")  # leading "any text" only slows the search


def _line_starts(text: str) -> list[int]:
    return [0] + [m.end() for m in re.finditer("\n", text)]


@dataclass(frozen=True)
class Places:
    """Where the old form of `edit` stands: the first line of each place, where lines like the
    edit's old ones begin."""
    edit: Edit
    lines: list[int]


def places(text: str, line: int, edits: list[Edit]) -> list[int]:
    """The first lines of the places where the old form of the most recent of `edits` that has
    one still stands (due_places)."""
    found = due_places(text, line, edits)
    return [] if found is None else found.lines


def due_places(text: str, line: int, edits: list[Edit]) -> Places | None:
    """The places in `text` where the old form of the most recent of `edits` that has one still
    stands, nearest first: below `line` (from it on), then above; the lines the edits made are
    left out. Where no whole form stands anywhere, the loose ones (`pattern_of`). At most
    MAX_PLACES. None where there is none."""
    made = [(e.line, e.line + e.after.count("\n") + 1) for e in edits]
    for loose in (False, True):
        for edit in reversed(edits):
            found = _matches(text, edit, made, loose)
            if found:
                below = sorted(n for n in found if n >= line)
                above = sorted((n for n in found if n < line), reverse=True)
                return Places(edit, (below + above)[:MAX_PLACES])
    return None


def _matches(text: str, edit: Edit, made: list[tuple[int, int]], loose: bool) -> set[int]:
    """The first lines of the places where `edit`'s old form stands (lines up from the match
    as many as the old lines have above the match's start), but those in the `made` spans."""
    pattern = pattern_of(edit, loose)
    if pattern is None:
        return set()
    starts = _line_starts(text)
    found = set()
    # (offset of a match, the line of the edit's old lines it stands for)
    offsets = [(m.start(), pattern.line) for m in pattern.regex.finditer(text)]
    for name in pattern.renamed:
        above = edit.before.count("\n", 0, re.search(rf"\b{re.escape(name)}\b", edit.before).start())
        offsets += [(m.start(), above) for m in re.finditer(rf"\b{re.escape(name)}\b", text)]
    for offset, above in offsets:
        line = bisect.bisect_right(starts, offset) - 1
        if not any(first <= line < end for first, end in made):
            found.add(max(0, line - above))
    return found
