"""Find the source files a benchmark may read: `.gitignore` respected, secrets and binaries skipped."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from lsp_server.serving.files import GitIgnore, is_secret, read_text

SOURCE_SUFFIXES = frozenset({
    ".py", ".pyi", ".js", ".jsx", ".ts", ".tsx", ".go", ".rs", ".c", ".h", ".cc", ".cpp", ".hpp",
    ".java", ".kt", ".swift", ".rb", ".php", ".lua", ".sh", ".cs", ".scala", ".sql", ".vim",
})
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


def find_sources(paths: list[Path]) -> Sources:
    """Read every source file under `paths` (files or folders) that git would not ignore."""
    sources = Sources()
    for root in paths:
        candidates = [root] if root.is_file() else GitIgnore(root).walk()
        for path in candidates:
            if is_secret(path.name):
                sources.skip("secret")
            elif path.suffix in SOURCE_SUFFIXES:
                text, reason = read_text(path, _MAX_BYTES)
                if text is None:
                    sources.skip(reason)
                else:
                    sources.files.append(SourceFile(path, text))
    return sources
