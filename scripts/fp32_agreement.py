"""How far a quantized GGUF model's logits are from the fp32 model on the same (dequantized)
weights, over real code: the same next token, mean KL divergence, per-position error as a
share of the logits' range. Ours (the native decoder, one pass per file), and with --llama
llama.cpp's on the same positions. Needs about 4x the file's size in memory for the fp32 twin.

    .venv/bin/python scripts/fp32_agreement.py MODEL.gguf FILE... [--tokens 400] [--llama]
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

from engine.execution.backends.native_llama import NativeLlama
from engine.execution.backends.torch_llama import TorchLlama
from engine.loading.formats.gguf_mapped import map_gguf
from engine.tokenization import load_tokenizer
from engine.loading.formats.load import load_weights


def _report(name: str, got: list[torch.Tensor], want: list[torch.Tensor]) -> None:
    same = total = 0
    kls, medians = [], []
    for g, w in zip(got, want):
        g, w = g[:, :w.shape[1]], w[:, :g.shape[1]]
        same += int((g.argmax(-1) == w.argmax(-1)).sum())
        total += len(g)
        kls.append(float(torch.nn.functional.kl_div(g.log_softmax(-1), w.log_softmax(-1), log_target=True,
                                                    reduction="none").sum(-1).mean()))
        medians.append(float(((g - w).abs().amax(-1) / w.abs().amax(-1)).median()))
    print(f"{name}: same next token {same}/{total} = {same / total:.4f}; mean KL per file "
          f"{', '.join(f'{k:.5f}' for k in kls)}; median error {', '.join(f'{m:.4f}' for m in medians)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("files", type=Path, nargs="+")
    parser.add_argument("--tokens", type=int, default=400, help="positions per file")
    parser.add_argument("--llama", action="store_true", help="llama.cpp's logits too (llama-cpp-python)")
    args = parser.parse_args()
    tokenizer = load_tokenizer(args.model)
    prompts = [tokenizer.encode(f.read_text())[:args.tokens] for f in args.files]
    ours = NativeLlama(map_gguf(args.model), max_len=args.tokens)
    twin = TorchLlama(load_weights(args.model), torch.float32, max_len=args.tokens)
    twin.limit_vocab(ours.vocab_size)

    def logits(model, prompt: list[int]) -> torch.Tensor:
        model.truncate(0)
        return torch.from_numpy(model.forward(prompt))

    want = [logits(twin, p) for p in prompts]
    del twin
    _report("ours", [logits(ours, p) for p in prompts], want)
    if args.llama:
        import llama_cpp

        llm = llama_cpp.Llama(str(args.model), n_ctx=args.tokens, logits_all=True, verbose=False)
        got = []
        for p in prompts:
            llm.reset()
            llm.eval(p)
            got.append(torch.from_numpy(np.array(llm.scores[:len(p)])).float())
        _report("llama.cpp", got, want)


if __name__ == "__main__":
    main()
