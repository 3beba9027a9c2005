"""The import graph of engine/ and lsp_server/ has no cycle, counting the imports made inside
functions: a cycle hidden by a deferred import is still two modules that cannot be read, tested
or moved one without the other."""
import ast
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
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:  # a name inside a module: the module
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


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
