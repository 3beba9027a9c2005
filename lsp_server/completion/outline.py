"""What a file defines and imports, cut to what a caller needs to know: signatures, class bodies
trimmed to their signatures and attributes, first docstring lines; no bodies.

Python goes through the standard library's `ast`; other languages, and Python that does not
parse (a file half-way through an edit), through a regex over definition lines. Outlines are
cached by the text's hash, so an unchanged file is parsed once."""
from __future__ import annotations

import ast
import hashlib
import logging
import re
from collections import OrderedDict
from dataclasses import dataclass

log = logging.getLogger(__name__)

CACHE_SIZE = 4096  # outlines kept (by content hash)
_LINE_CHARS = 160  # a longer attribute or constant line is cut here

# A line that defines an identifier in most languages: `def f`, `class C`, `fn f`, `func F`,
# `function f`, `struct S`, `interface I`, `type T`, `enum E`, `trait T`, with modifiers.
_DEFINES = re.compile(r"^[ \t]*(?:(?:export|pub|public|private|protected|static|async|default|abstract)\s+)*"
                      r"(?:def|class|function|fn|func|struct|interface|type|enum|trait)\s+([A-Za-z_]\w*)", re.M)
_ASSIGNS = re.compile(r"^([A-Za-z_]\w*)[ \t]*(?::[^=\n]*)?=[^=]", re.M)  # a module-level `NAME = ...`
_FROM_IMPORT = re.compile(r"^[ \t]*from[ \t]+(\.*[\w.]*)[ \t]+import[ \t]+(\([^)]*\)|[^\n#;]+)", re.M)
_IMPORT = re.compile(r"^[ \t]*import[ \t]+([\w.]+(?:[ \t]+as[ \t]+\w+)?(?:[ \t]*,[ \t]*[\w.]+(?:[ \t]+as[ \t]+\w+)?)*)",
                     re.M)


@dataclass(frozen=True)
class Definition:
    name: str
    text: str  # its outline, indented as in the file
    members: frozenset[str] = frozenset()  # a class's methods and attributes
    signature: str = ""  # its decorators and `def`/`class` line(s) alone (default: text)

    @property
    def header(self) -> str:
        return self.signature or self.text


@dataclass(frozen=True)
class Outline:
    definitions: tuple[Definition, ...]
    parsed: bool  # by ast (else by the regex fallback)

    def find(self, name: str, member: bool = False) -> Definition | None:
        """The definition of `name`, else (`member`: it is used as an attribute) the class
        that has a member `name`."""
        return (next((d for d in self.definitions if d.name == name), None)
                or member and next((d for d in self.definitions if name in d.members), None) or None)

    def summary(self) -> str:
        """A module's public names at a glance: the header of each definition."""
        return "\n".join(d.header for d in self.definitions if not d.name.startswith("_"))


@dataclass(frozen=True)
class Import:
    module: str  # as written: "pkg.models", ".models", "." ...
    names: tuple[str, ...]  # the names imported from it; () for `import module`


_cache: OrderedDict[tuple[bytes, bool], Outline] = OrderedDict()


def outline(text: str, python: bool, name: str = "") -> Outline:
    """The outline of a file's text (`python`: try `ast` first), cached by content hash;
    `name` is for the log."""
    key = (hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest(), python)
    if (found := _cache.get(key)) is not None:
        _cache.move_to_end(key)
        return found
    result = _python_outline(text, name) if python else None
    _cache[key] = result = result or _text_outline(text)
    if len(_cache) > CACHE_SIZE:
        _cache.popitem(last=False)
    return result


def defined_names(text: str) -> set[str]:
    """The names a file seems to define, by regex: cheap enough for every file of a workspace."""
    return set(_DEFINES.findall(text)) | set(_ASSIGNS.findall(text))


def imports(text: str) -> list[Import]:
    """The file's Python imports, by regex so that a file that does not parse still has them."""
    found = []
    for match in _FROM_IMPORT.finditer(text):
        names = re.sub(r"#[^\n]*", "", match[2]).strip("() \t\n")
        found.append(Import(match[1], tuple(n.split()[0] for n in names.split(",") if n.split())))
    for match in _IMPORT.finditer(text):
        found += [Import(part.split()[0], ()) for part in match[1].split(",")]
    return found


def _text_outline(text: str) -> Outline:
    """Each line that defines an identifier, as its own definition."""
    lines = text.split("\n")
    starts = [text.count("\n", 0, m.start()) for m in _DEFINES.finditer(text)]
    return Outline(tuple(Definition(m, lines[n].rstrip()[:_LINE_CHARS])
                         for m, n in zip(_DEFINES.findall(text), starts)), parsed=False)


def _python_outline(text: str, name: str) -> Outline | None:
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        log.info("outline: %s is not valid Python (%s): its def/class lines stand in", name or "a file", exc)
        return None
    lines = text.split("\n")
    definitions = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            definitions.append(Definition(node.name, "\n".join(_function(node, lines)),
                                          signature="\n".join(_header(node, lines))))
        elif isinstance(node, ast.ClassDef):
            body, members = _class(node, lines)
            definitions.append(Definition(node.name, "\n".join(body), frozenset(members),
                                          "\n".join(_header(node, lines))))
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for name in _assigned(node):
                definitions.append(Definition(name, lines[node.lineno - 1].rstrip()[:_LINE_CHARS]))
    return Outline(tuple(definitions), parsed=True)


def _assigned(node: ast.Assign | ast.AnnAssign) -> list[str]:
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    return [t.id for t in targets if isinstance(t, ast.Name)]


def _header(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef, lines: list[str]) -> list[str]:
    """The decorators and the `def`/`class` line(s), up to the body."""
    first = min([node.lineno] + [d.lineno for d in node.decorator_list])
    end = max(node.body[0].lineno - 1, node.lineno)
    header = [line.rstrip() for line in lines[first - 1:end]]
    while len(header) > 1 and (not header[-1].strip() or header[-1].lstrip().startswith("#")):
        header.pop()
    return header


def _docstring(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef, indent: str) -> list[str]:
    doc = ast.get_docstring(node)
    first = doc.strip().split("\n", 1)[0].strip() if doc else ""
    return [f'{indent}"""{first}"""'] if first else []


def _indent(node: ast.stmt, lines: list[str]) -> str:
    line = lines[node.lineno - 1]
    return line[:len(line) - len(line.lstrip())]


def _function(node: ast.FunctionDef | ast.AsyncFunctionDef, lines: list[str]) -> list[str]:
    header = _header(node, lines)
    if node.body[0].lineno == node.lineno:  # `def f(): return 1`: the line says it all
        return header
    indent = _indent(node.body[0], lines)
    return header + _docstring(node, indent) + [f"{indent}..."]


def _class(node: ast.ClassDef, lines: list[str]) -> tuple[list[str], list[str]]:
    """A class cut to its header, docstring, attributes and its methods' outlines."""
    out = _header(node, lines)
    if node.body[0].lineno == node.lineno:
        return out, []
    out += _docstring(node, _indent(node.body[0], lines))
    members = []
    for item in node.body:
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out += _function(item, lines)
            members.append(item.name)
        elif isinstance(item, ast.ClassDef):
            out += _header(item, lines) + [f"{_indent(item.body[0], lines)}..."]
            members.append(item.name)
        elif isinstance(item, (ast.Assign, ast.AnnAssign)):
            out.append(lines[item.lineno - 1].rstrip()[:_LINE_CHARS])
            members += _assigned(item)
    return out, members
