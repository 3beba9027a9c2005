"""Tokens per KB of this repository's Python code (engine/, lsp_server/) under each vocabulary in
.cache/llama-vocab (and the embedded model's), ours against llama.cpp's `llama-tokenize`, with the
time each tokenizer takes to build. Prints a Markdown table (docs/tokenizers.md).

    python scripts/tokenizer_report.py --llama-tokenize /path/to/llama.cpp/build/bin/llama-tokenize

Without --llama-tokenize the llama.cpp columns are left empty.
"""
from __future__ import annotations

import argparse
import ast
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.errors import ModelLoadError  # noqa: E402
from engine.tokenization import load_tokenizer  # noqa: E402
from engine.loading.fetch import model_path  # noqa: E402


def llama_cpp_ids(binary: Path, vocab: Path, text_file: Path) -> list[int] | None:
    """llama.cpp's ids for the file: no BOS, special text not parsed (as the reference files)."""
    run = subprocess.run([str(binary), "-m", str(vocab), "-f", str(text_file), "--ids", "--no-bos",
                          "--no-escape", "--no-parse-special", "--log-disable"], capture_output=True, text=True)
    if run.returncode != 0:
        return None
    return ast.literal_eval(run.stdout.strip().splitlines()[-1])


def first_difference(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--llama-tokenize", type=Path)
    args = parser.parse_args()
    files = sorted([*ROOT.glob("engine/**/*.py"), *ROOT.glob("lsp_server/**/*.py")])
    text = "".join(p.read_text(encoding="utf-8") for p in files)
    kb = len(text.encode()) / 1024
    vocabs = sorted((ROOT / ".cache" / "llama-vocab").glob("ggml-vocab-*.gguf")) + [model_path("smollm2-135m")]
    print(f"{len(files)} files, {kb:.0f} KB\n")
    print("| vocabulary | build (s) | tokens/KB ours | tokens/KB llama.cpp | ids identical |")
    print("|---|---|---|---|---|")
    with tempfile.NamedTemporaryFile("w", suffix=".py", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        for vocab in vocabs:
            name = vocab.name.removeprefix("ggml-vocab-").removesuffix(".gguf")
            start = time.perf_counter()
            try:
                tok = load_tokenizer(vocab)
            except ModelLoadError as exc:
                reason = str(exc).split(": ", 1)[1]
                print(f"| {name} | refused in {time.perf_counter() - start:.2f} s: {reason} | | | |")
                continue
            built = time.perf_counter() - start
            ours = tok.encode(text)
            ref = llama_cpp_ids(args.llama_tokenize, vocab, Path(f.name)) if args.llama_tokenize else None
            same = "" if ref is None else "yes" if ref == ours else f"no: from {first_difference(ref, ours)}"
            ref_rate = "" if ref is None else f"{len(ref) / kb:.1f}"
            print(f"| {name} | {built:.2f} | {len(ours) / kb:.1f} | {ref_rate} | {same} |")


if __name__ == "__main__":
    main()
