"""GPU check of every family's forward: TorchLlama on CUDA against transformers' float32 logits.

    python scripts/gpu_arch_check.py --prepare .cache/gpu-arch   # here: tiny models + references
    python scripts/gpu_arch_check.py .cache/gpu-arch             # on the GPU machine (carry it)

The GPU machine has torch, safetensors, numpy and tokenizers but no transformers and no network,
so the models (tests/hf_tiny.py) and transformers' CPU float32 logits are made here, and the
GPU side only loads and compares. Prints one JSON line per model; exits non-zero on a mismatch.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

IDS = [(7 * i + 3) % 300 for i in range(80)]
CASES = {  # name -> (family, rope_scaling)
    "llama": ("llama", None), "qwen2": ("qwen2", None), "qwen3": ("qwen3", None),
    "starcoder2": ("starcoder2", None),
    "llama-linear": ("llama", {"rope_type": "linear", "factor": 4.0}),
    "llama-llama3": ("llama", {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                               "high_freq_factor": 4.0, "original_max_position_embeddings": 32}),
    "qwen2-yarn": ("qwen2", {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32}),
}
FP32_ATOL = 1e-3  # float32 on a GPU sums in another order than on a CPU


def prepare(root: Path) -> None:
    from safetensors.torch import save_file

    from tests import hf_tiny

    for name, (family, scaling) in CASES.items():
        model = hf_tiny.build(family, root / name, seed=len(name), rope_scaling=scaling)
        save_file({"logits": hf_tiny.logits(model, IDS)}, str(root / f"{name}.reference.safetensors"))


def check(root: Path) -> bool:
    from safetensors.torch import load_file

    from engine.execution.backends.torch_llama import TorchLlama
    from engine.loading.formats.load import load_weights

    ok = True
    for name in CASES:
        want = load_file(str(root / f"{name}.reference.safetensors"))["logits"]
        result = {"model": name, "device": torch.cuda.get_device_name()}
        for label, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
            model = TorchLlama(load_weights(root / name), dtype=dtype, max_len=128, device="cuda")
            got = torch.from_numpy(model.forward(IDS))
            result[f"{label}_max_abs_diff"] = float((got - want).abs().max())
            result[f"{label}_top1_agreement"] = float((got.argmax(-1) == want.argmax(-1)).float().mean())
        result["ok"] = result["fp32_max_abs_diff"] < FP32_ATOL
        ok &= result["ok"]
        sys.stdout.write(json.dumps(result) + "\n")
    return ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("root", type=Path)
    parser.add_argument("--prepare", action="store_true")
    args = parser.parse_args()
    if args.prepare:
        prepare(args.root)
    elif not check(args.root):
        sys.exit(1)


if __name__ == "__main__":
    main()
