"""Prompts cut from real code: files of the Python standard library on this machine."""
import random
import sysconfig
from pathlib import Path

STDLIB = Path(sysconfig.get_paths()["stdlib"])
FILES = ["textwrap.py", "json/decoder.py", "json/encoder.py", "csv.py", "shlex.py",
         "fnmatch.py", "heapq.py", "bisect.py", "colorsys.py", "glob.py", "calendar.py",
         "string.py", "dataclasses.py", "argparse.py", "difflib.py", "gettext.py"]


def stdlib_text(name: str) -> str:
    return (STDLIB / name).read_text()


def code_prompts(n: int, seed: int = 0, max_chars: int = 1500) -> list[tuple[str, str]]:
    """n (file, prompt) pairs, each a file's text up to the end of a randomly chosen line."""
    rng = random.Random(seed)
    prompts = []
    for i in range(n):
        name = FILES[i % len(FILES)]
        lines = stdlib_text(name).splitlines(keepends=True)
        cut = rng.randrange(20, len(lines) - 5)
        prompts.append((name, "".join(lines[:cut])[-max_chars:]))
    return prompts
