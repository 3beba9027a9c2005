"""The import graph of engine/ and lsp_server/ has no cycle, counting the imports made inside
functions: a cycle hidden by a deferred import is still two modules that cannot be read, tested
or moved one without the other. So too the native decoder's C files: no two call each other's
exported functions."""
import ast
import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("engine", "lsp_server")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for package in PACKAGES for p in (ROOT / package).rglob("*.py")}


def imported(path: Path, name: str, known: dict[str, Path]) -> set[str]:
    """The project's modules that `path` (module `name`) imports anywhere in its body: `import a.b`
    and `from a import b` name a.b where it is a module, else a."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package, up level - 1
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            # `from pkg import sub` reads pkg's namespace, so pkg's __init__ must have run: an
            # edge to pkg itself besides the submodule (a cycle through an __init__ shows).
            targets = [base] + [f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in known]
        else:
            continue
        for target in targets:
            while target and target not in known:  # a name inside a module: the module
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


@cache  # two tests read it
def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imported(path, name, known) for name, path in known.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm), each
    sorted: every one holds a cycle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_the_cycle_finder_finds_a_cycle_through_a_deferred_import(tmp_path):
    """The finder itself: a cycle closed by an import inside a function is found."""
    for name, text in {"a.py": "import b\n", "b.py": "def f():\n    from c import g\n", "c.py": "from a import x\n",
                       "d.py": "import a\n"}.items():
        (tmp_path / name).write_text(text)
    known = {p.stem: p for p in tmp_path.glob("*.py")}
    edges = {name: imported(path, name, known) for name, path in known.items()}
    assert cycles(edges) == [["a", "b", "c"]]


def test_the_cycle_finder_finds_a_cycle_through_a_package_init(tmp_path):
    """A package's __init__ importing a module that takes a sibling through the package
    (`from pkg import sibling`) is a cycle, though Python resolves it at run time."""
    (tmp_path / "pkg").mkdir()
    for name, text in {"pkg/__init__.py": "from pkg.loader import load\n",
                       "pkg/loader.py": "from pkg import formats\n", "pkg/formats.py": "",
                       "pkg/plain.py": "from pkg.formats import x\n"}.items():
        (tmp_path / name).write_text(text)
    known = {".".join(p.relative_to(tmp_path).with_suffix("").parts).removesuffix(".__init__"): p
             for p in tmp_path.rglob("*.py")}
    edges = {name: imported(path, name, known) for name, path in known.items()}
    assert cycles(edges) == [["pkg", "pkg.loader"]]


def test_the_project_has_no_import_cycle():
    found = cycles(graph())
    assert not found, "import cycles (modules that import each other, directly or not):\n" + "\n".join(
        " <-> ".join(c) for c in found)



# lsp_server's rooms: completion and next edits are used by serving, the CLI and bench, and
# import nothing of serving, so each can be read, tested and moved without the server.
ROOMS_BELOW_SERVING = ("lsp_server.completion", "lsp_server.next_edit")


def against_direction(edges: dict[str, set[str]]) -> list[str]:
    return sorted(f"{name} -> {target}" for name, targets in edges.items()
                  if name.startswith(ROOMS_BELOW_SERVING)
                  for target in targets if target.startswith("lsp_server.serving"))


def test_the_direction_check_sees_a_wrong_import():
    edges = {"lsp_server.completion.prompt": {"engine.api"},
             "lsp_server.next_edit.rewrite": {"lsp_server.serving.scheduler"},
             "lsp_server.serving.server": {"lsp_server.completion.prompt"}}
    assert against_direction(edges) == ["lsp_server.next_edit.rewrite -> lsp_server.serving.scheduler"]


def test_completion_and_next_edits_import_nothing_of_serving():
    wrong = against_direction(graph())
    assert not wrong, "completion/next_edit import serving:\n" + "\n".join(wrong)


# The native decoder's C files (engine/execution/native/): calls between them go one way, as
# the Python modules' imports do, so each file can be read with what it calls and not the reverse.
NATIVE = ROOT / "engine" / "execution" / "native"
_C_NOISE = re.compile(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|^[ \t]*#(?:[^\n]*\\\n)*[^\n]*',
                      re.S | re.M)  # comments, strings, characters and preprocessor lines
_DEFINED = re.compile(r"(\w+)\s*\([^;{}]*\)\s*$")  # a head `... name(params)` before its body
_CALLED = re.compile(r"\b([A-Za-z_]\w*)\s*\(")
_STATIC_MACRO = re.compile(r"^[ \t]*#[ \t]*define[ \t]+(\w+)[ \t]+[^\n]*\bstatic\b", re.M)


def c_functions(text: str, statics: frozenset[str] | set[str] = frozenset()) -> tuple[set[str], set[str]]:
    """(the functions a C file defines without `static`, the names it calls in its bodies): a
    function is a top-level head ending in a parameter list followed by a brace. Macros that
    say `static` (ALWAYS_INLINE) count as it, where the file or its headers define them."""
    static = re.compile(r"\b(?:%s)\b" % "|".join(["static", *sorted(statics)]))
    text = _C_NOISE.sub(" ", text)
    exported, called = set(), set()
    depth, start, head = 0, 0, ""
    for i, char in enumerate(text):
        if char == "{":
            if depth == 0:
                head, start = text[start:i], i + 1
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                defined = _DEFINED.search(head)
                if defined:
                    called |= set(_CALLED.findall(text[start:i]))
                    if not static.search(head):
                        exported.add(defined.group(1))
                start = i + 1
        elif char == ";" and depth == 0:
            start = i + 1
    return exported, called


def c_calls(paths: list[Path]) -> dict[str, set[str]]:
    """File -> the other files whose exported functions it calls."""
    statics = {name for p in paths[0].parent.glob("*.[ch]") for name in _STATIC_MACRO.findall(p.read_text())}
    found = {p.name: c_functions(p.read_text(), statics) for p in paths}
    return {name: {other for other, (exported, _) in found.items() if other != name and called & exported}
            for name, (_, called) in found.items()}


def test_the_c_call_finder_sees_two_files_calling_each_other(tmp_path):
    for name, text in {
        "a.c": '/* b_g() */ #include "x.h"\nint a_f(int n) { return n ? b_g(n - 1) : 0; }\n',
        "b.c": "static int b_h(void);\nint b_g(int n) {\n  if (n) { return a_f(n); }\n  return b_h();\n}\n",
        "c.c": "static int b_g(int n) { return n; }\nint c_f(void) { return b_g(1) + a_f(2) + d_g(); }\n",
        "d.c": 'void d_f(void) { printf("a_f(%d)", 1); }\nconst int table[2] = {1, 2};\nLOCAL int d_g(void) { return 0; }\n',
        "x.h": "#define LOCAL static inline\n",
    }.items():
        (tmp_path / name).write_text(text)
    calls = c_calls(sorted(tmp_path.glob("*.c")))
    assert calls == {"a.c": {"b.c"}, "b.c": {"a.c"}, "c.c": {"a.c", "b.c"}, "d.c": set()}
    assert cycles(calls) == [["a.c", "b.c"]]


def test_no_two_native_c_files_call_each_other():
    found = cycles(c_calls(sorted(NATIVE.glob("*.c"))))
    assert not found, "C files calling each other's exported functions:\n" + "\n".join(" <-> ".join(c) for c in found)
