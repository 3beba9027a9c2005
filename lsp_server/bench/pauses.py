"""`bench --pauses N`: someone writing real code, a pause after each new line's indentation, on a
clock that is the same for every contender.

Each of the user's files is written again from a point in it: the file so far is opened, the
user reads it for `read_s`, then types the next lines key by key (`key_s` apart; the newline
with its indentation is one key, as editors indent), and after the indentation of some lines
pauses for `pause_s` before typing the rest. The first pause comes as the first line is begun,
as it does when someone starts work in a file. Nobody waits for a contender: each is driven as
its editor drives it (pause_editors.py), and what counts is what is on its screen.

Scored per pause: the ghost text's first line at each moment of the pause against the line the
file has (right by t), and when ghost text first appeared. Both contenders see the same pauses
on the same clock, taken in turn, each from a process loaded once with the model in memory.
"""
from __future__ import annotations

import math
import random
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from lsp_server.bench.quality import lines_by_workload, string_lines
from lsp_server.bench.sources import SourceFile

PAUSES_PER_FILE = 4
MOMENTS_S = (0.5, 1.0, 1.5, 2.0, 4.0, 8.0)  # into a pause, where the screen is scored
WATCH_STEP_S = 0.02  # how often the replay looks at the screen during a pause
MIN_CODE_CHARS = 6  # `else:`, `pass`, `}` say little
CROSS_FILE_MIN_LINE = 20  # a cross-file pause has some of its file above it


@dataclass(frozen=True)
class Walk:
    """One file written again from line `first` (0-based): the lines before it exist already."""
    path: Path
    lines: list[str]
    first: int
    pauses: list[int]  # the lines typed after a pause (the others are typed without one)


def _is_code(line: str) -> bool:
    code = line.strip()
    return len(code) >= MIN_CODE_CHARS and not code.startswith(("#", "//", "/*", "*", '"""', "'''"))


def walks(sources: list[SourceFile], count: int, seed: int) -> list[Walk]:
    """`count` pauses over files of at least 60 lines, PAUSES_PER_FILE in each, from a point at
    least 40 lines in, at lines of code (not comments, not inside docstrings); the same for the
    same seed and files."""
    rng = random.Random(f"{seed}:pauses")
    files = sorted((s for s in sources if s.text.count("\n") >= 60), key=lambda s: str(s.path))
    rng.shuffle(files)
    chosen = []
    for source in files:
        if len(chosen) * PAUSES_PER_FILE >= count:
            break
        lines, prose = source.text.split("\n"), string_lines(source)
        starts = [i for i in range(40, len(lines)) if _is_code(lines[i]) and i not in prose]
        if len(starts) < PAUSES_PER_FILE * 2:
            continue
        first = rng.choice(starts[:len(starts) - PAUSES_PER_FILE * 2])
        code = [i for i in range(first, len(lines)) if _is_code(lines[i]) and i not in prose]
        n = min(PAUSES_PER_FILE, count - len(chosen) * PAUSES_PER_FILE)
        chosen.append(Walk(source.path, lines, first, code[:n]))
    return chosen


def cross_file_walks(sources: list[SourceFile], count: int, seed: int) -> list[Walk]:
    """`count` walks of one pause each, at a line of code that uses a name another file defines
    (quality.lines_by_workload), at least CROSS_FILE_MIN_LINE lines in: the file is opened just
    before the line, so the pause is the first in the file. Files are taken in turn, one line
    each, so the lines spread over as many files as there are; the same for the same seed and files."""
    rng = random.Random(f"{seed}:cross-file pauses")
    per_file: dict[Path, list[int]] = {}
    texts = {}
    for source, number in lines_by_workload(sources)["cross-file"]:
        lines = source.text.split("\n")
        if number >= CROSS_FILE_MIN_LINE and _is_code(lines[number]):
            per_file.setdefault(source.path, []).append(number)
            texts[source.path] = lines
    files = sorted(per_file, key=str)
    rng.shuffle(files)
    for path in files:
        rng.shuffle(per_file[path])
    chosen: list[Walk] = []
    while len(chosen) < count and any(per_file.values()):
        for path in files:
            if per_file[path] and len(chosen) < count:
                number = per_file[path].pop()
                chosen.append(Walk(path, texts[path], number, [number]))
    return chosen


def _first_line(text: str) -> str:
    return text.split("\n", 1)[0].strip()


def _indent(line: str) -> str:
    return line[:len(line) - len(line.lstrip())]


@dataclass(frozen=True)
class User:
    """The user's clock: the same for every contender."""
    pause_s: float = 1.5  # each pause, from the indentation's key to the next key
    key_s: float = 0.12  # between keys
    read_s: float = 0.0  # between opening a file and its first key

    def moments(self) -> list[float]:
        """The moments of a pause that are scored (seconds into it)."""
        return [t for t in MOMENTS_S if t < self.pause_s] + [self.pause_s]


@dataclass
class Pause:
    contender: str
    path: str
    line: int
    expected: str
    first_in_file: bool
    # What the screen showed: (seconds into the pause, the ghost text's first line) at the pause's
    # start and at every change; "" for nothing.
    screen: list[tuple[float, str]] = field(default_factory=list)
    # The first line our server suggests here with its whole window, waited for (--whole-window);
    # None where not asked.
    whole_window: str | None = None

    def shown_at(self, t: float) -> str:
        current = ""
        for at, text in self.screen:
            if at > t:
                break
            current = text
        return current

    def right_at(self, t: float) -> bool:
        shown = self.shown_at(t)
        return bool(shown) and shown == self.expected

    @property
    def first_ghost_s(self) -> float:
        """Seconds into the pause when ghost text first showed; inf where it never did."""
        return next((at for at, text in self.screen if text), math.inf)


def replay(editor, walk: Walk, user: User) -> list[Pause]:
    """Write `walk`'s file again in `editor` on the user's clock."""
    editor.open(walk.path.resolve().as_uri(), "\n".join(walk.lines[:walk.first]))
    editor.step(time.perf_counter() + user.read_s)
    results = []
    for number in range(walk.first, walk.pauses[-1] + 1):
        target = walk.lines[number]
        indent = _indent(target)
        editor.type("\n" + indent)
        if number in walk.pauses:
            results.append(_pause(editor, walk, number, user))
            if number == walk.pauses[-1]:
                break  # the rest of the line changes nothing scored
        else:
            editor.step(time.perf_counter() + user.key_s)
        for character in target[len(indent):]:
            editor.type(character)
            editor.step(time.perf_counter() + user.key_s)
    editor.close()
    return results


def _pause(editor, walk: Walk, number: int, user: User) -> Pause:
    """The screen through one pause, watched in short steps."""
    pause = Pause(editor.name, str(walk.path), number, walk.lines[number].strip(), number == walk.pauses[0])
    started = time.perf_counter()
    shown = None
    while (now := time.perf_counter()) < started + user.pause_s:
        text = _first_line(editor.screen.ghost)
        if text != shown:
            pause.screen.append((round(now - started, 3), text))
            shown = text
        editor.step(min(now + WATCH_STEP_S, started + user.pause_s))
    return pause


def ask_whole_windows(editor, pauses: list[Pause], chosen: list[Walk]) -> None:
    """Set each pause's `whole_window`: what `editor` (ours, given coldPrefillMs 0) suggests for
    the same text as at the pause, with the time to use its whole window."""
    files = {str(walk.path): walk.lines for walk in chosen}
    answers: dict[tuple[str, int], str] = {}
    for pause in pauses:
        if (pause.path, pause.line) not in answers:
            lines = files[pause.path]
            text = "\n".join(lines[:pause.line] + [_indent(lines[pause.line])])
            print(f"lsp_server bench: whole window {Path(pause.path).name}:{pause.line + 1}", file=sys.stderr)
            answers[(pause.path, pause.line)] = _first_line(editor.answer(Path(pause.path).resolve().as_uri(), text))
        pause.whole_window = answers[(pause.path, pause.line)]


def wilson(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The 95% Wilson score interval of a proportion."""
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return round(max(0.0, centre - half), 4), round(min(1.0, centre + half), 4)


def _counts(pauses: list[Pause], moments: list[float]) -> dict:
    out = {"pauses": len(pauses)}
    for t in moments:
        right = sum(p.right_at(t) for p in pauses)
        out[f"right_by_{t:g}s"] = {"count": right, "share": round(right / len(pauses), 4) if pauses else 0.0,
                                   "interval": wilson(right, len(pauses))}
        out[f"shown_by_{t:g}s"] = sum(bool(p.shown_at(t)) for p in pauses)
    return out


def summarize(pauses: list[Pause], user: User) -> dict:
    """{contender: numbers}: right and shown by each moment, for all pauses, the first in each file
    and the later ones; p50/p90 from the pause to ghost text (inf where it never came)."""
    out = {}
    moments = user.moments()
    for name in dict.fromkeys(p.contender for p in pauses):
        mine = [p for p in pauses if p.contender == name]
        firsts = [p.first_ghost_s for p in mine]
        out[name] = _counts(mine, moments) | {
            "first_in_file": _counts([p for p in mine if p.first_in_file], moments),
            "later_in_file": _counts([p for p in mine if not p.first_in_file], moments),
            "p50_s": _percentile(firsts, 50), "p90_s": _percentile(firsts, 90)}
        asked = [p for p in mine if p.whole_window is not None]
        if asked:
            whole = [p for p in asked if p.whole_window == p.expected]
            out[name]["whole_window"] = {
                "pauses": len(asked), "right": len(whole), "interval": wilson(len(whole), len(asked)),
                "right_on_screen_by_the_end": sum(p.right_at(user.pause_s) for p in whole)}
    return out


def _percentile(values: list[float], q: float) -> float | None:
    """None where more than (100 - q)% never showed anything."""
    value = float(np.percentile(values, q, method="inverted_cdf")) if values else math.inf
    return None if math.isinf(value) else round(value, 3)


def run_pauses(editors: list, chosen: list[Walk], user: User) -> list[Pause]:
    """Each walk in each editor, the editors in turn per walk (machine drift hits both alike)."""
    pauses = []
    for i, walk in enumerate(chosen):
        for editor in editors[i % len(editors):] + editors[:i % len(editors)]:
            print(f"lsp_server bench: pauses {walk.path.name} {editor.name}", file=sys.stderr)
            pauses += replay(editor, walk, user)
    return pauses


def format_pauses(numbers: dict, user: User) -> str:
    moments = user.moments()
    lines = [f"\n\npauses: right first line on screen by t into a pause at a new line's indentation "
             f"(pauses of {user.pause_s:g} s, keys {user.key_s * 1000:g} ms apart, {user.read_s:g} s reading a file first)",
             f"{'contender':<19}{'pauses':>7}" + "".join(f"{f'by {t:g} s':>18}" for t in moments)
             + f"{'shown':>8}{'p50 s':>8}{'p90 s':>8}"]
    for name, m in numbers.items():
        for label, part in (("", m), (" first", m["first_in_file"]), (" later", m["later_in_file"])):
            if not part["pauses"]:
                continue
            cells = "".join(f"{_cell(part[f'right_by_{t:g}s']):>18}" for t in moments)
            tail = f"{part[f'shown_by_{moments[-1]:g}s']:>8}" + (
                f"{_seconds(m['p50_s']):>8}{_seconds(m['p90_s']):>8}" if not label else "")
            lines.append(f"{name + label:<19}{part['pauses']:>7}{cells}{tail}")
    for name, m in numbers.items():
        if whole := m.get("whole_window"):
            low, high = whole["interval"]
            lines.append(f"{name}: right with its whole window, waited for: {whole['right']} of {whole['pauses']} "
                         f"[{low:.0%}-{high:.0%}]; of those, on screen by the pause's end: "
                         f"{whole['right_on_screen_by_the_end']}")
    lines.append("(right: counts, share and 95% interval; shown: pauses with ghost text at the end; p50/p90: from "
                 "the pause to ghost text, - where it never came; first/later: the first pause in a file, the others)")
    return "\n".join(lines)


def _cell(right: dict) -> str:
    low, high = right["interval"]
    return f"{right['count']} {right['share']:.0%} [{low:.0%}-{high:.0%}]"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def as_json(pauses: list[Pause]) -> list[dict]:
    return [asdict(p) for p in pauses]
