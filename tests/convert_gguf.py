"""Run llama.cpp's convert_hf_to_gguf.py on several folders in one process (its imports take
seconds): `python tests/convert_gguf.py CONVERTER JOBS_JSON`, JOBS_JSON a list of
[folder, outtype, outfile].

Three things to adjust:
- the converter (written against transformers 4) reads hyper-parameters through
  AutoConfig.to_dict(), which in transformers 5 holds `rope_parameters` instead of `rope_theta`
  and `rope_scaling`, so it would silently drop both: it reads config.json itself instead, as
  its own fallback path does;
- the converter imports mistral_common (for Mistral's own format) and sentencepiece (for a
  tokenizer.model), neither of which our folders have: stand-in modules satisfy the imports;
- it names the pre-tokenizer by hashing how the tokenizer splits a test text and refuses a
  tokenizer it does not know, as our small test tokenizer is: it is called "default".
"""
import json
import sys
import types
from pathlib import Path


def _stub_modules() -> None:
    """Stand-ins for what the converter imports but never uses on our folders (no
    tokenizer.model, no Mistral format): sentencepiece and mistral_common."""
    attributes = {"sentencepiece": ["SentencePieceProcessor"],
                  "mistral_common": [], "mistral_common.tokens": [], "mistral_common.tokens.tokenizers": [],
                  "mistral_common.tokens.tokenizers.base": ["TokenizerVersion"],
                  "mistral_common.tokens.tokenizers.multimodal": ["DATASET_MEAN", "DATASET_STD"],
                  "mistral_common.tokens.tokenizers.tekken": ["Tekkenizer"],
                  "mistral_common.tokens.tokenizers.sentencepiece": ["SentencePieceTokenizer"]}
    for name, names in attributes.items():
        module = sys.modules[name] = types.ModuleType(name)
        for a in names:
            setattr(module, a, type(a, (), {}))


def main() -> None:
    converter, jobs = Path(sys.argv[1]), json.loads(Path(sys.argv[2]).read_text())
    import transformers  # noqa: F401  first: it probes for these modules, which must look absent

    _stub_modules()
    sys.path.insert(0, str(converter.parent))
    import convert_hf_to_gguf as c

    c.ModelBase.load_hparams = staticmethod(
        lambda folder, is_mistral_format: json.loads((Path(folder) / "config.json").read_text()))
    c.TextModel.get_vocab_base_pre = lambda self, tokenizer: "default"
    for folder, outtype, outfile in jobs:
        sys.argv = ["convert_hf_to_gguf.py", folder, "--outtype", outtype, "--outfile", outfile]
        c.main()


if __name__ == "__main__":
    main()
