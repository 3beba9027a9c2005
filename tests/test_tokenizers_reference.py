"""Our tokenizers against llama.cpp's reference tokenizations of its vocab-only GGUFs.

`make test` unpacks them into .cache/llama-vocab/ (see the Makefile): for most vocabularies a
`.gguf.inp` (inputs separated by a line `__ggml_vocab_test__`) and a `.gguf.out` (llama.cpp's ids
per input: no BOS, special-token text not parsed). Those ids are the independent check: every
input of every supported vocabulary must encode to exactly them.
"""
from pathlib import Path

import pytest

from engine.errors import ModelLoadError
from engine.tokenization import load_tokenizer
from engine.loading.formats.gguf_header import read_header
from tests.llama_vocab import VOCABS, needs_vocabs, reference, tokenizer, vocab_path, write_vocab

pytestmark = pytest.mark.integration  # llama.cpp's reference tokenizations (`make test` unpacks them)

# Not byte-level BPE nor SentencePiece: WordPiece (BERT) and Unigram (T5); refused on purpose.
UNSUPPORTED = {"bert-bge", "nomic-bert-moe"}
# SentencePiece vocabularies add a dummy-prefix space that decode() keeps (it renders continuations).
SENTENCEPIECE = {"llama-spm", "phi-3", "baichuan"}
# Code-like text for the vocabularies that ship no reference: this repository's own sources.
CODE = sorted((Path(__file__).resolve().parents[1] / "engine").glob("*.py"))[:6]


def decoded(name: str, text: str) -> str:
    """What decode(encode(text)) gives: the text, after SentencePiece's dummy-prefix space."""
    return " " + text if name in SENTENCEPIECE and text else text


with_reference = [n for n in VOCABS
                  if n not in UNSUPPORTED and vocab_path(n).with_suffix(".gguf.out").exists()]
without_reference = [n for n in VOCABS if n not in UNSUPPORTED and n not in with_reference]


@needs_vocabs
def test_the_reference_set_is_complete():
    """The sdist's vocabularies: a missing one would silently shrink the tests below."""
    assert {"qwen2", "llama-bpe", "deepseek-coder", "deepseek-llm", "starcoder", "refact", "gpt-2",
            "falcon", "mpt", "command-r", "llama-spm", "phi-3"} <= set(with_reference)


@needs_vocabs
@pytest.mark.parametrize("name", with_reference)
def test_encodes_exactly_as_llama_cpp(name):
    tok = tokenizer(name)
    cases = reference(name)
    assert len(cases) > 30
    wrong = [(text, ids, tok.encode(text)) for text, ids in cases if tok.encode(text) != ids]
    assert not wrong, "\n".join(f"{text!r}: llama.cpp {ids}, ours {ours}" for text, ids, ours in wrong[:5])


@needs_vocabs
@pytest.mark.parametrize("name", with_reference)
def test_decodes_the_reference_ids_back(name):
    tok = tokenizer(name)
    wrong = [text for text, ids in reference(name) if tok.decode(ids) != decoded(name, text)]
    assert not wrong, f"{len(wrong)} inputs decode differently, e.g. {wrong[0]!r}"


@needs_vocabs
@pytest.mark.parametrize("name", without_reference)
def test_round_trips_where_there_is_no_reference(name):
    tok = tokenizer(name)
    texts = [p.read_text(encoding="utf-8") for p in CODE] + [t for t, _ in reference("qwen2")]
    wrong = [t for t in texts if tok.decode(tok.encode(t)) != decoded(name, t)]
    assert not wrong, f"{len(wrong)} texts do not round-trip, e.g. {wrong[0][:80]!r}"


@needs_vocabs
@pytest.mark.parametrize("name", sorted(UNSUPPORTED & set(VOCABS)))
def test_unsupported_tokenizer_models_are_refused(name):
    with pytest.raises(ModelLoadError, match="is not supported") as err:
        load_tokenizer(vocab_path(name))
    assert "\n" not in str(err.value)


@needs_vocabs
@pytest.mark.parametrize("name", [n for n in with_reference if n not in SENTENCEPIECE])
def test_token_texts_spell_ascii_text(name):
    """token_texts() maps the vocabulary without the decoder; on ASCII text the texts of the ids
    concatenate to the text (for SentencePiece: after the dummy-prefix space)."""
    tok = tokenizer(name)
    texts = tok.token_texts()
    assert len(texts) == tok.vocab_size
    for text in [p.read_text(encoding="utf-8")[:3000] for p in CODE]:
        assert "".join(texts[i] for i in tok.encode(text)) == text


@needs_vocabs
@pytest.mark.parametrize("name", sorted(SENTENCEPIECE & set(VOCABS)))
def test_sentencepiece_token_texts_keep_the_space(name):
    """A lone "▁Hello" decodes to "Hello" in a SentencePiece decoder; mid-sequence it is " Hello"."""
    tok = tokenizer(name)
    texts = tok.token_texts()
    for text in ["def area(r):\n    return 3.14 * r ** 2\n", "x = {'a': [1, 2]}\t# ok"]:
        assert "".join(texts[i] for i in tok.encode(text)) == " " + text


# Edge cases the reference files miss, tokenized by llama.cpp's `llama-tokenize --no-bos --no-escape
# --no-parse-special` (built from the same sdist): bytes a vocabulary lacks (Falcon has no \x0b),
# non-ASCII whitespace against DeepSeek's literal ranges, tabs and CRLF.
LLAMA_TOKENIZE = [
    ("falcon", "x \x0b y", [99, 204, 291]),
    ("falcon", "\n\t\x0c   \xa0|", [1132, 194, 466, 4381, 103]),
    ("deepseek-llm", "a  \u3000\x0bb", [64, 243, 88946, 186, 65]),
    ("deepseek-coder", "# \u3000中文\u2028x", [2, 207, 343, 209, 759, 1919, 350, 101, 87]),
    ("llama-spm", "\tdef f(x):\n\treturn x  # ü",
     [29871, 12, 1753, 285, 29898, 29916, 1125, 13, 12, 2457, 921, 29871, 396, 2505]),
    ("qwen2", "s = '<|fim_prefix|>'\r\n", [82, 284, 3857, 91, 69, 318, 13974, 91, 95363]),
    ("llama-bpe", "x\xa0=\u20031_000_000\n\n\n\tpass",
     [87, 4194, 28, 116503, 16, 62, 931, 62, 931, 1432, 42531]),
]


@needs_vocabs
@pytest.mark.parametrize("name, text, ids", LLAMA_TOKENIZE)
def test_edge_cases_encode_as_llama_tokenize(name, text, ids):
    assert tokenizer(name).encode(text) == ids


# Families without a vocab-only file of their own: GPT-2's vocabulary with another pre-type splits
# text as that family does, which is what the rows differ in. Ids from llama-tokenize on the same
# swapped file (tokens, types and merges of ggml-vocab-gpt-2.gguf; only tokenizer.ggml.pre changed).
FAMILY_TEXT = ("class HTTPServerError(x~~y): CamelCase's  π≈3.14159; über 中文かな ～ “quoted” 😀"
               "\n\n\tend")
_COMMON = [43281, 20448, 338, 220, 18074, 222, 35705, 230, 18, 13]
_TAIL = [26, 6184, 120, 527, 220, 40792, 23877, 229, 27370, 26945, 27332, 121, 252, 564, 250, 421, 5191,
         447, 251, 30325, 222, 628, 197, 437]
_DIGITS = [16, 19, 16, 20, 24]
FAMILY_IDS = {
    "deepseek-v3": [4871, 38288, 18497, 12331, 7, 87, 93, 93, 88, 2599, *_COMMON, 23756, 3270, *_TAIL],
    "gpt-4o": [4871, 38288, 18497, 12331, 7, 87, 4907, 88, 2599, *_COMMON, 23756, 3270, *_TAIL],
    "tekken": [4871, 38288, 18497, 12331, 7, 87, 4907, 88, 2599, *_COMMON, *_DIGITS, *_TAIL],
    "seed-coder": [4871, 38288, 18497, 12331, 7, 87, 4907, 88, 2599, *_COMMON, *_DIGITS, *_TAIL],
    "bailingmoe": [4871, 38288, 18497, 12331, 7, 87, 4907, 88, 2599, *_COMMON, *_DIGITS, *_TAIL],
    "poro-chat": [4871, 38288, 18497, 12331, 7, 87, 4907, 88, 8, 25, *_COMMON, 1415, 19707, *_TAIL],
    "viking": [4871, 38288, 18497, 12331, 7, 87, 4907, 88, 8, 25, *_COMMON, *_DIGITS, *_TAIL],
}


def with_pre(pre: str, dest: Path) -> Path:
    """GPT-2's vocabulary with another tokenizer.ggml.pre."""
    meta = read_header(vocab_path("gpt-2")).fields
    return write_vocab(dest, meta["tokenizer.ggml.tokens"], meta["tokenizer.ggml.token_type"],
                       meta["tokenizer.ggml.merges"], pre=pre)


@needs_vocabs
@pytest.mark.parametrize("pre", sorted(FAMILY_IDS))
def test_other_families_split_as_llama_cpp(pre, tmp_path):
    assert load_tokenizer(with_pre(pre, tmp_path / "v.gguf")).encode(FAMILY_TEXT) == FAMILY_IDS[pre]
