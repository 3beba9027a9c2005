"""How byte-level BPE vocabularies split text before merging, per GGUF `tokenizer.ggml.pre`.

The regexes are llama.cpp's (src/llama-vocab.cpp, llm_tokenizer_bpe): each one splits every piece
the previous one left, and the text between matches stays a piece of its own ("isolated"). Adding a
family is adding a row to PRE_TOKENIZERS; each row's vocabulary must match llama.cpp's reference
tokenizations (tests/test_tokenizers_reference.py) or at least round-trip.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PreTokenizer:
    regexes: tuple[str, ...]
    # Llama 3: a word that is itself a token is taken whole, even if merges would not build it.
    ignore_merges: bool = False
    # Whether the family's prompts start with BOS when the GGUF does not say (add_bos_token).
    add_bos: bool = False


_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_CONTRACTIONS = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
_LLAMA3 = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
           r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2 = _LLAMA3.replace(r"\p{N}{1,3}", r"\p{N}")  # digits one by one
# llama.cpp matches regexes without \p{..} after turning non-ASCII whitespace into \x0b, so such
# whitespace (U+3000, U+2028, ...) never matches these literal ranges: hence "&&\S".
_CJK = "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff&&\\S]+"
# DeepSeek-LLM spells out its letters and punctuation; escaped so that no editor normalises them.
_DEEPSEEK_LLM_LETTERS = (
    "\\s?[A-Za-z\xb5\xc0-\xd6\xd8-\xf6\xf8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af\u0370-"
    "\u0373\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5"
    "\u03f7-\u0481\u048a-\u052f\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-"
    "\u1cba\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d"
    "\u1f20-\u1f45\u1f48-\u1f4d\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-"
    "\u1fbc\u1fbe\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4"
    "\u1ff6-\u1ffc\u2102\u2107\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d"
    "\u212f-\u2134\u2139\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4"
    "\u2ceb-\u2cee\u2cf2\u2cf3\ua640-\ua66d\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e"
    "\uab70-\uabbf\ufb00-\ufb06\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f"
    "\U000104b0-\U000104d3\U000104d8-\U000104fb\U00010c80-\U00010cb2\U00010cc0-\U00010cf2"
    "\U000118a0-\U000118df\U0001e900-\U0001e943]+"
)
_DEEPSEEK_LLM_PUNCT = "\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002&&\\S]+"

# llama.cpp's \p{S} leaves out "~" (its ASCII table of symbols lacks it): [\p{S}&&[^~]].
_DEEPSEEK3 = (r"""[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+"""
              r"|[^\r\n\p{L}\p{P}[\p{S}&&[^~]]]?[\p{L}\p{M}]+| ?[\p{P}[\p{S}&&[^~]]]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# llama.cpp's rewrite of the upper/lower-case classes: on non-ASCII letters it cannot tell case.
_UPPER_THEN_LOWER = r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+"
_LOWER_AFTER_UPPER = r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*"
_TEKKEN = (_UPPER_THEN_LOWER + "|" + _LOWER_AFTER_UPPER
           + r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_GPT4O = (_UPPER_THEN_LOWER + _CONTRACTIONS + "?|" + _LOWER_AFTER_UPPER + _CONTRACTIONS
          + r"?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_SEED_CODER = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_BAILINGMOE = (r"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
               r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+")
_PORO = r" ?[^(\s|.,!?…。，、।۔،)]+"

_DEFAULT = PreTokenizer((r"[\p{P}\$\+<=>\^~\|]+", _GPT2, r"\p{N}+", "[0-9][0-9][0-9]"))
_GPT2_ROW = PreTokenizer((_GPT2,))
_LLAMA3_ROW = PreTokenizer((_LLAMA3,), ignore_merges=True, add_bos=True)
_QWEN2_ROW = PreTokenizer((_QWEN2,))
_STARCODER_ROW = PreTokenizer((r"\p{N}", _GPT2))  # digits one by one, then GPT-2's splits
_DBRX_ROW = PreTokenizer((_LLAMA3,))  # Llama 3's splits, but merges always apply and no BOS
_DEEPSEEK3_ROW = PreTokenizer((r"\p{N}{1,3}", "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+", _DEEPSEEK3))
_GPT4O_ROW = PreTokenizer((_GPT4O,))
_PORO_ROW = PreTokenizer((_PORO,))

# tokenizer.ggml.pre -> how to split. Names that llama.cpp maps to the same regexes share a row.
PRE_TOKENIZERS: dict[str, PreTokenizer] = {
    "default": _DEFAULT,
    "gpt-2": _GPT2_ROW,
    "phi-2": _GPT2_ROW,
    "mpt": _GPT2_ROW,
    "olmo": _GPT2_ROW,
    "jais": _GPT2_ROW,
    "trillion": _GPT2_ROW,
    "gigachat": _GPT2_ROW,
    "a.x-4.0": _GPT2_ROW,
    "mellum": _GPT2_ROW,
    "exaone4": _GPT2_ROW,
    "llama-bpe": _LLAMA3_ROW,
    "llama3": _LLAMA3_ROW,
    "llama-v3": _LLAMA3_ROW,
    "falcon3": _LLAMA3_ROW,
    "falcon-h1": _LLAMA3_ROW,
    "pixtral": _LLAMA3_ROW,
    "midm-2.0": _LLAMA3_ROW,
    "lfm2": _LLAMA3_ROW,
    "dbrx": _DBRX_ROW,
    "smaug-bpe": _DBRX_ROW,
    "qwen2": _QWEN2_ROW,
    "deepseek-r1-qwen": _QWEN2_ROW,
    "stablelm2": _QWEN2_ROW,
    "megrez": _QWEN2_ROW,
    "hunyuan": _QWEN2_ROW,
    "starcoder": _STARCODER_ROW,
    "smollm": _STARCODER_ROW,
    "refact": _STARCODER_ROW,
    "command-r": _STARCODER_ROW,
    "codeshell": _STARCODER_ROW,
    "exaone": _STARCODER_ROW,
    "minerva-7b": _STARCODER_ROW,
    "deepseek-v3": _DEEPSEEK3_ROW,
    "hunyuan-dense": _DEEPSEEK3_ROW,
    "gpt-4o": _GPT4O_ROW,
    "llama4": _GPT4O_ROW,
    "tekken": PreTokenizer((_TEKKEN,), ignore_merges=True, add_bos=True),
    "seed-coder": PreTokenizer((_SEED_CODER,)),
    "bailingmoe": PreTokenizer((_BAILINGMOE,)),
    "poro-chat": _PORO_ROW,
    "bloom": _PORO_ROW,
    "gpt3-finnish": _PORO_ROW,
    "viking": PreTokenizer((_PORO, r"\p{N}")),
    "deepseek-coder": PreTokenizer((r"[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", _CJK, r"\p{N}")),
    "deepseek-llm": PreTokenizer((r"[\r\n]", _DEEPSEEK_LLM_LETTERS, _DEEPSEEK_LLM_PUNCT, r"\s+$", _CJK,
                                  r"\p{N}+")),
    "falcon": PreTokenizer((r"[\p{P}\$\+<=>\^~\|`]+", _GPT2, "[0-9][0-9][0-9]")),
}
