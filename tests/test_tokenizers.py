"""Tokenizer behaviour beyond the reference ids: refusals, special text, end/FIM/BOS tokens, and
the BOS reaching the model. Small vocabularies are written here (tests/llama_vocab.py); the
llama.cpp vocabularies come from .cache/llama-vocab (their tests are in the integration tier)."""
import json
import string
import time
from pathlib import Path

import pytest
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, normalizers, pre_tokenizers, processors

from engine.engine import Engine
from engine.errors import ModelLoadError
from engine.api import Request
from engine.tokenization import load_tokenizer
from engine.healing import Healer
from engine.models import load_model
from engine.loading.formats.gguf_header import read_header
from engine.tokenization.tokenizer import FimTokens
from lsp_server.completion.prompt import Cursor, build_prompt
from tests import refusals
from tests.llama_vocab import needs_vocabs, tokenizer, vocab_path, write_vocab
from tests.tiny_models import random_llama

CONTROL, USER_DEFINED = 3, 4
# A byte-level vocabulary over printable ASCII ("Ġ" is the byte-level space) with one merge.
CHARS = [c for c in string.printable if c.isprintable() and c != " "] + ["Ġ"]


def vocab(path: Path, *, specials: tuple[str, ...] = ("<s>", "</s>"), pre: str | None = "qwen2",
          **kwargs) -> Path:
    """A vocab-only GGUF: `specials` (control tokens) first, then CHARS and "ab"."""
    tokens = [*specials, *CHARS, "ab"]
    types = [CONTROL] * len(specials) + [1] * (len(tokens) - len(specials))
    return write_vocab(path, tokens, types, ["a b"], pre=pre, **kwargs)


def refused(path: Path, match: str) -> str:
    return refusals.refused(load_tokenizer, path, match)


def test_unknown_pre_tokenizer_is_refused_naming_the_known_ones(tmp_path):
    path = vocab(tmp_path / "v.gguf", pre="no-such-family")
    message = refused(path, "unknown pre-tokenizer 'no-such-family'")
    assert "qwen2" in message and "llama-bpe" in message and "deepseek-coder" in message


def test_unknown_tokenizer_model_is_refused(tmp_path):
    refused(vocab(tmp_path / "v.gguf", model="rwkv"), "tokenizer model 'rwkv' is not supported")


def test_truncated_and_garbage_files_are_refused(tmp_path):
    whole = vocab(tmp_path / "whole.gguf").read_bytes()
    for name, data in [("truncated", whole[:len(whole) // 2]), ("garbage", b"\x07" * 5000),
                       ("header-only", whole[:24]), ("empty", b"")]:
        (tmp_path / f"{name}.gguf").write_bytes(data)
        refused(tmp_path / f"{name}.gguf", "not a valid GGUF file")


def test_a_model_with_an_unsupported_tokenizer_fails_before_its_weights_are_read(tmp_path):
    """The file has no tensors: were the weights read first, the error would be about them."""
    start = time.perf_counter()
    with pytest.raises(ModelLoadError, match="unknown pre-tokenizer"):
        load_model(vocab(tmp_path / "v.gguf", pre="no-such-family"), dtype="fp32", backend="torch")
    assert time.perf_counter() - start < 1.0


def test_fim_end_and_bos_tokens_come_from_metadata_ids(tmp_path):
    specials = ("<a>", "<b>", "<c>", "<d>", "<e>")  # names no family uses: only the ids can tell
    tok = load_tokenizer(vocab(tmp_path / "v.gguf", specials=specials, add_bos=True, ids={
        "fim_pre": 2, "fim_suf": 3, "fim_mid": 1, "eos": 4, "eot": 0, "bos": 3}))
    assert tok.fim == FimTokens(prefix=2, suffix=3, middle=1)
    assert tok.eos_ids == {0, 4}
    assert (tok.bos_id, tok.add_bos) == (3, True)
    older = load_tokenizer(vocab(tmp_path / "old.gguf", specials=specials,
                                       ids={"prefix": 0, "suffix": 1, "middle": 2}))
    assert older.fim == FimTokens(prefix=0, suffix=1, middle=2)
    assert not older.add_bos  # a qwen2-style vocabulary without add_bos_token


def test_fim_token_text_in_a_user_file_is_plain_text(tmp_path):
    tok = load_tokenizer(vocab(tmp_path / "v.gguf",
                                     specials=("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>")))
    assert tok.fim == FimTokens(0, 1, 2)  # found by name: no FIM ids in this file's metadata
    text = 'marker = "<|fim_prefix|>"'
    ids = tok.encode(text)
    assert not {0, 1, 2} & set(ids)
    assert tok.decode(ids) == text


@needs_vocabs
def test_qwen2_special_text_is_not_parsed_but_user_defined_tokens_are():
    meta = read_header(vocab_path("qwen2")).fields
    tokens, types = meta["tokenizer.ggml.tokens"], meta["tokenizer.ggml.token_type"]
    control = {i for i, t in enumerate(types) if t == CONTROL}
    assert {"<|endoftext|>", "<|im_end|>"} <= {tokens[i] for i in control}
    tok = tokenizer("qwen2")
    text = 'x = "<|im_end|>" + "<|endoftext|>" + "<|fim_prefix|>"'
    assert not control & set(tok.encode(text))
    assert tok.decode(tok.encode(text)) == text
    # llama.cpp matches user-defined tokens even without parse_special.
    pad = next(i for i, t in enumerate(types) if t == USER_DEFINED)
    assert pad in tok.encode(f"a{tokens[pad]}b")


@needs_vocabs
def test_qwen2_text_token_end_of_sentence_is_not_an_end_token():
    meta = read_header(vocab_path("qwen2")).fields
    tokens, types = meta["tokenizer.ggml.tokens"], meta["tokenizer.ggml.token_type"]
    plain = tokens.index("</s>")
    assert types[plain] != CONTROL
    tok = tokenizer("qwen2")
    assert plain not in tok.eos_ids
    assert meta["tokenizer.ggml.eos_token_id"] in tok.eos_ids


@needs_vocabs
def test_deepseek_coder_user_defined_letters_decode_exactly():
    meta = read_header(vocab_path("deepseek-coder")).fields
    user_defined = {i for i, t in enumerate(meta["tokenizer.ggml.token_type"]) if t == USER_DEFINED}
    tok = tokenizer("deepseek-coder")
    ids = tok.encode("Größe = über")
    assert user_defined & set(ids)  # "ö" and "ü" are user-defined tokens in this vocabulary
    assert tok.decode(ids) == "Größe = über"
    assert "".join(tok.token_texts()[i] for i in ids) == "Größe = über"


@needs_vocabs
@pytest.mark.parametrize("name, add_bos", [("llama-bpe", True), ("llama-spm", True), ("deepseek-coder", True),
                                           ("command-r", True), ("qwen2", False), ("starcoder", False)])
def test_bos_follows_the_metadata_and_the_family(name, add_bos):
    """llama-bpe's GGUF has no add_bos_token: Llama 3 wants a BOS all the same (as in llama.cpp)."""
    meta = read_header(vocab_path(name)).fields
    tok = tokenizer(name)
    assert tok.add_bos == add_bos
    assert tok.bos_id == meta["tokenizer.ggml.bos_token_id"]
    ids = tok.encode("def f():")
    assert tok.with_bos(ids) == ([tok.bos_id] + ids if add_bos else ids)


@needs_vocabs
def test_healing_never_removes_the_bos():
    tok = tokenizer("llama-bpe")
    healer = Healer(tok)
    [word] = tok.encode("return")
    assert healer.split([tok.bos_id, word]) == ([tok.bos_id], "return")
    assert healer.split([word, tok.bos_id]) == ([word, tok.bos_id], "")
    assert healer.split([tok.bos_id]) == ([tok.bos_id], "")


def test_the_engine_and_fim_prompts_start_with_the_bos(tmp_path):
    tok = load_tokenizer(vocab(tmp_path / "v.gguf", add_bos=True, ids={"bos": 0, "eos": 1}))
    target = random_llama(0, vocab=tok.vocab_size)
    seen: list[int] = []
    forward = target.forward
    target.forward = lambda tokens, *a, **k: (seen.extend(tokens), forward(tokens, *a, **k))[1]
    Engine(target, tok).complete("x = ab", Request(max_new_tokens=2), "ar")
    assert seen[0] == 0  # the text prompt starts with x: only a prepended BOS puts 0 first
    fim = load_tokenizer(vocab(tmp_path / "fim.gguf", add_bos=True, ids={"bos": 0},
                                     specials=("<s>", "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>")))
    ids = build_prompt(Cursor("def f(", "):\n"), fim, 4096)
    assert ids[:2] == [0, fim.fim.prefix] and ids[-1] == fim.fim.middle


def write_hf_folder(folder: Path, tokenizer: HFTokenizer, config: dict,
                    tokenizer_config: dict | None = None) -> Path:
    folder.mkdir()
    tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "config.json").write_text(json.dumps(config))
    if tokenizer_config is not None:
        (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    return folder


def test_hf_folder_special_text_bos_and_end_tokens(tmp_path):
    """Qwen2.5-Coder's tokenizer.json leaves its FIM tokens non-special; llama.cpp's conversion
    makes them control tokens, and so do we. Llama 3's BOS comes from the post-processor."""
    hf = HFTokenizer(models.BPE(vocab={c: i for i, c in enumerate(["<s>", "</s>", *CHARS, "ab"])},
                                merges=[("a", "b")]))
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()
    hf.add_special_tokens(["<s>", "</s>"])
    hf.add_tokens(["<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"])
    hf.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 0)])
    tok = load_tokenizer(write_hf_folder(tmp_path / "m", hf, {"eos_token_id": [1]}))
    assert (tok.bos_id, tok.add_bos, tok.eos_ids) == (0, True, {1})
    assert tok.fim is not None
    text = 'marker = "<|fim_prefix|>"'
    assert tok.fim.prefix not in tok.encode(text) and tok.decode(tok.encode(text)) == text
    told = load_tokenizer(write_hf_folder(tmp_path / "told", hf, {},
                                          {"add_bos_token": False, "eos_token": "</s>"}))
    assert (told.add_bos, told.eos_ids) == (False, {1})


@pytest.mark.parametrize("decoder", [
    decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                       decoders.Strip(" ", 1, 0)]),
    decoders.Metaspace(replacement="▁", prepend_scheme="always")])
def test_hf_sentencepiece_decoders_keep_a_continuation_s_space(tmp_path, decoder):
    """Generated " x" is "▁x"; Hugging Face's decoders drop its space as a dummy prefix."""
    hf = HFTokenizer(models.BPE(vocab={"<unk>": 0, "▁": 1, "x": 2, "▁x": 3}, merges=[("▁", "x")],
                                unk_token="<unk>"))
    hf.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    hf.decoder = decoder
    assert hf.decode([3]) == "x"
    tok = load_tokenizer(write_hf_folder(tmp_path / "m", hf, {}))
    assert tok.encode("x") == [3]
    assert tok.decode([3, 3]) == " x x"
    assert tok.token_texts()[3] == " x"


@needs_vocabs
def test_deepseek_coder_fim_tokens_are_found_by_name_and_their_text_stays_text():
    """This GGUF marks "<｜fim▁begin｜>" user-defined; llama.cpp finds it by name and makes it control."""
    tokens = read_header(vocab_path("deepseek-coder")).fields["tokenizer.ggml.tokens"]
    tok = tokenizer("deepseek-coder")
    names = ("<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>")
    assert tok.fim == FimTokens(*(tokens.index(t) for t in names))
    text = 'FIM = ("<｜fim▁begin｜>", "<｜fim▁hole｜>")'
    assert not {tok.fim.prefix, tok.fim.suffix} & set(tok.encode(text))
    assert tok.decode(tok.encode(text)) == text


def test_hf_bos_from_a_post_processor_sequence(tmp_path):
    """Llama 3.1's tokenizer.json: ByteLevel then TemplateProcessing, no add_bos_token anywhere."""
    hf = HFTokenizer(models.BPE(vocab={c: i for i, c in enumerate(["<|begin_of_text|>", *CHARS])}, merges=[]))
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.add_special_tokens(["<|begin_of_text|>"])
    hf.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                      special_tokens=[("<|begin_of_text|>", 0)])])
    tok = load_tokenizer(write_hf_folder(tmp_path / "m", hf, {"eos_token_id": 5}))
    assert (tok.bos_id, tok.add_bos, tok.eos_ids) == (0, True, {5})


@needs_vocabs
@pytest.mark.parametrize("name", ["llama-spm", "llama-bpe", "qwen2", "deepseek-coder"])
def test_output_text_decoded_token_by_token_is_the_whole_decode(name):
    """Decoding keeps the output's text by decoding each token once (engine/decoding.py
    _Output): at every length, and with any tokens appended, it is what decoding all the ids
    gives, also where a character's bytes are cut between tokens (byte fallback, byte-level
    pieces)."""
    from engine.api import Request
    from engine.decoding import Vocabulary, _Output

    tok = tokenizer(name)
    ids = tok.encode("def naïve(x):\n\treturn f'{x}€ — 世界 🎉 λ≠∞'  # déjà vu\n")
    out = _Output(Request(max_new_tokens=len(ids) + 1), Vocabulary(frozenset(), tok.decode, None), owed="")
    for i, token in enumerate(ids):
        out.commit([token])
        assert out.text == tok.decode(ids[:i + 1])
        assert out._text_with(ids[i + 1:]) == tok.decode(ids)
    assert any(tok.decode([t]).endswith("\ufffd") for t in ids)  # some character is cut between tokens
