"""Find the source files a benchmark may read: `.gitignore` respected, secrets and binaries skipped."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import pathspec

SOURCE_SUFFIXES = frozenset({
    ".py", ".pyi", ".js", ".jsx", ".ts", ".tsx", ".go", ".rs", ".c", ".h", ".cc", ".cpp", ".hpp",
    ".java", ".kt", ".swift", ".rb", ".php", ".lua", ".sh", ".cs", ".scala", ".sql", ".vim",
})
# Never read secrets, even when a repository forgot to ignore them.
_SECRET_NAMES = (".env", "id_rsa", "id_ed25519")
_SECRET_SUFFIXES = (".pem", ".key", ".p12")
_MAX_BYTES = 1_000_000  # a generated or vendored file this big says nothing about the user's code


@dataclass
class SourceFile:
    path: Path
    text: str


@dataclass
class Sources:
    files: list[SourceFile] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)  # reason -> count

    def skip(self, reason: str) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1


def _is_secret(name: str) -> bool:
    return name.startswith(_SECRET_NAMES) or name.endswith(_SECRET_SUFFIXES)


def _ignore_spec(directory: Path) -> pathspec.GitIgnoreSpec | None:
    try:
        return pathspec.GitIgnoreSpec.from_lines((directory / ".gitignore").read_text().splitlines())
    except (OSError, UnicodeDecodeError):
        return None


def _ignored(path: Path, is_dir: bool, specs: list[tuple[Path, pathspec.GitIgnoreSpec]]) -> bool:
    for base, spec in specs:
        rel = path.relative_to(base).as_posix() + ("/" if is_dir else "")
        if spec.match_file(rel):
            return True
    return False


def _walk(root: Path) -> list[Path]:
    """Files under root in sorted order; each directory's .gitignore applies below it."""
    found: list[Path] = []
    specs_at: dict[Path, list[tuple[Path, pathspec.GitIgnoreSpec]]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        specs = list(specs_at.get(here.parent, [])) if here != root else []
        if (spec := _ignore_spec(here)) is not None:
            specs.append((here, spec))
        specs_at[here] = specs
        dirnames[:] = sorted(d for d in dirnames
                             if d != ".git" and not _ignored(here / d, True, specs))
        found += [here / f for f in sorted(filenames) if not _ignored(here / f, False, specs)]
    return found


def _read(path: Path, sources: Sources) -> None:
    try:
        data = path.read_bytes()
    except OSError:
        sources.skip("unreadable")
        return
    if len(data) > _MAX_BYTES:
        sources.skip("too large")
    elif b"\0" in data[:8192]:
        sources.skip("binary")
    else:
        try:
            sources.files.append(SourceFile(path, data.decode("utf-8")))
        except UnicodeDecodeError:
            sources.skip("not UTF-8")


def find_sources(paths: list[Path]) -> Sources:
    """Read every source file under `paths` (files or folders) that git would not ignore."""
    sources = Sources()
    for root in paths:
        candidates = [root] if root.is_file() else _walk(root)
        for path in candidates:
            if _is_secret(path.name):
                sources.skip("secret")
            elif path.suffix in SOURCE_SUFFIXES:
                _read(path, sources)
    return sources
