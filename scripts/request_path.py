"""How many functions and files one inline request passes through: a profiler hook on one warm
`suggestions()` call of the language server (the small model, lookup; torch fp32 unless --dtype
gguf), counting the distinct functions of this project (lambdas and properties included) and
their files, on the event loop and the model thread alike; then the named functions alone
(comprehensions and lambdas are read where they stand): all, the server's and the engine's.
Run from a checkout's root to count that checkout:

  PYTHONPATH=. .venv/bin/python scripts/request_path.py [--list] [--dtype gguf]
"""
from __future__ import annotations

import argparse
import asyncio
import re
import sys
import threading
from pathlib import Path

from lsprotocol import types

ROOT = Path.cwd().resolve()
PACKAGES = tuple(str(ROOT / p) for p in ("engine", "lsp_server"))
# Code read where it stands, not a hop to another place: comprehensions and lambdas.
INLINE = re.compile(r"<(listcomp|genexpr|dictcomp|setcomp|lambda)>$")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--list", action="store_true", help="print each function")
    ap.add_argument("--dtype", default="fp32", help="the model's dtype: fp32 (torch), or gguf "
                    "(the native decoder on the file, as users run it)")
    args = ap.parse_args()
    from engine.engine import Engine
    from lsp_server.serving import server as server_module
    from lsp_server.serving.scheduler import Scheduler

    from pygls.workspace import Workspace

    server = server_module.server
    server.protocol._workspace = Workspace(ROOT.as_uri())  # what `initialize` would make
    server.status = lambda *a, **k: None  # no client to notify
    engine = Engine.load("smollm2-135m", dtype=args.dtype, threads=2)
    server.engine = engine
    if hasattr(server, "documents"):  # the releases with one store of documents
        from lsp_server.completion.suggester import Suggester

        server.suggester = Suggester(engine, server.documents)
    elif hasattr(server, "suggester"):  # the releases that have one orchestrator
        from lsp_server.completion.suggester import Suggester

        server.suggester = Suggester(engine, server.settings, server.shareable_documents)
    text = (ROOT / "examples" / "shapes.py").read_text()
    uri = (ROOT / "examples" / "shapes.py").as_uri()
    server.workspace.put_text_document(types.TextDocumentItem(uri, "python", 1, text))
    if hasattr(server, "documents"):
        server.documents.open(uri, text, 1)
    position = types.Position(24, 8)
    seen: set[tuple[str, str]] = set()

    def hook(frame, event, arg):
        if event == "call" and frame.f_code.co_filename.startswith(PACKAGES):
            seen.add((frame.f_code.co_filename, frame.f_code.co_qualname))

    async def request() -> None:
        server.settings = type(server.settings)(timeBudgetMs=0)
        await server.suggestions(uri, position, 1)  # warm: caches filled, first-call costs paid
        server.typed.forget(uri)
        seen.clear()
        threading.setprofile(hook)
        server.scheduler = Scheduler()  # its model thread starts now, with the hook
        sys.setprofile(hook)
        await server.suggestions(uri, position, 1)
        sys.setprofile(None)
        threading.setprofile(None)

    asyncio.run(request())
    files = {f for f, _ in seen}
    if args.list:
        for f, name in sorted(seen):
            print(f"{Path(f).relative_to(ROOT)}: {name}")
    print(f"one warm inline request: {len(seen)} functions in {len(files)} files")
    named = {(f, name) for f, name in seen if not INLINE.search(name)}
    for layer, where in (("all", PACKAGES), ("server", PACKAGES[1:]), ("engine", PACKAGES[:1])):
        mine = {(f, name) for f, name in named if f.startswith(where)}
        print(f"  named functions ({layer}): {len(mine)} in {len(dict.fromkeys(f for f, _ in mine))} files")
    server.scheduler.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
