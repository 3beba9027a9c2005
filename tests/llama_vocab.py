"""llama.cpp's vocab-only GGUFs and reference tokenizations (`make test` unpacks them into
.cache/llama-vocab/, see the Makefile), and a writer for small vocab-only GGUFs."""
from functools import cache
from pathlib import Path

import gguf
import pytest

from engine.tokenization import load_tokenizer
from engine.tokenization.tokenizer import Tokenizer

VOCAB_DIR = Path(__file__).resolve().parents[1] / ".cache" / "llama-vocab"
SEPARATOR = "\n__ggml_vocab_test__\n"
VOCABS = sorted(p.name.removeprefix("ggml-vocab-").removesuffix(".gguf")
                for p in VOCAB_DIR.glob("ggml-vocab-*.gguf"))
_UNPACKED = pytest.mark.skipif(not VOCABS, reason=f"no llama.cpp vocabularies in {VOCAB_DIR}: run `make test`")


def needs_vocabs(test):
    """llama.cpp's files, which `make test` unpacks, so the integration tier (building a large
    vocabulary takes a second); skipped where they are not unpacked."""
    return pytest.mark.integration(_UNPACKED(test))


def vocab_path(name: str) -> Path:
    return VOCAB_DIR / f"ggml-vocab-{name}.gguf"


@cache
def tokenizer(name: str) -> Tokenizer:
    return load_tokenizer(vocab_path(name))


def reference(name: str) -> list[tuple[str, list[int]]]:
    """The inputs and llama.cpp's ids, split as llama.cpp's test-tokenizer-0 splits them."""
    with open(vocab_path(name).with_suffix(".gguf.inp"), encoding="utf-8", newline="") as f:
        raw = f.read()
    inputs = raw.split(SEPARATOR)
    if raw.endswith(SEPARATOR):
        inputs.pop()
    lines = vocab_path(name).with_suffix(".gguf.out").read_text(encoding="utf-8").split("\n")
    return [(text, [int(i) for i in line.split()]) for text, line in zip(inputs, lines)]


def write_vocab(path: Path, tokens: list[str], types: list[int], merges: list[str], *,
                model: str = "gpt2", pre: str | None = None, ids: dict[str, int] | None = None,
                add_bos: bool | None = None) -> Path:
    """A vocab-only GGUF with these tokens; `ids` sets tokenizer.ggml.<key>_token_id."""
    writer = gguf.GGUFWriter(str(path), arch="llama")
    writer.add_tokenizer_model(model)
    if pre is not None:
        writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    for key, value in (ids or {}).items():
        writer.add_uint32(f"tokenizer.ggml.{key}_token_id", value)
    if add_bos is not None:
        writer.add_add_bos_token(add_bos)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()
    return path
