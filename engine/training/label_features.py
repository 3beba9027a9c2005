"""Label training text with the target's features, once, for the feature-conditioned draft.

    python -m engine.training.label_features --work /tmp/feat-work

For each 512-token chunk of the corpus (engine/training/data.py) the target (bf16) computes its
final normed hidden state at every position: the draft is trained to predict the next one, and
the target's next-token distribution is that feature times the head, so no logits are stored.
Shards of chunks are written in a seeded order and skipped when present, so a stopped run resumes,
and training (engine/training/train_feature_draft.py) can read the shards while more are labelled.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file

from engine.execution.backends.torch_llama import TorchLlama
from engine.loading.fetch import model_path
from engine.tokenization import load_tokenizer
from engine.training.data import corpus, log, shuffled_chunks
from engine.loading.formats.load import load_weights


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m engine.training.label_features", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--work", type=Path, default=Path("/tmp/feat-work"), help="corpus cache and shards")
    p.add_argument("--chunk", type=int, default=512)
    p.add_argument("--shard-chunks", type=int, default=32)
    p.add_argument("--shards", type=int, default=150, help="training shards to write (all: 146)")
    p.add_argument("--held-chunks", type=int, default=24, help="held-out chunks for evaluation")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def label(target: TorchLlama, chunks: np.ndarray) -> dict[str, torch.Tensor]:
    feats = []
    for ids in chunks.tolist():
        target.truncate(0)
        target.forward(ids, logits=False)
        feats.append(target.features[:len(ids)].clone())
    return {"tokens": torch.from_numpy(chunks.astype(np.int32)), "features": torch.stack(feats)}


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    args.work.mkdir(parents=True, exist_ok=True)
    path = model_path("smollm2-135m")
    weights = load_weights(path)
    tokenizer = load_tokenizer(path)
    train, held = corpus(args.work, tokenizer, min(tokenizer.eos_ids))
    target = TorchLlama(weights, torch.bfloat16, max_len=args.chunk)
    target.record_features()

    held_file = args.work / "held.safetensors"
    if not held_file.exists():
        save_file(label(target, shuffled_chunks(held, args.chunk, args.seed)[:args.held_chunks]),
                  str(held_file))
    chunks = shuffled_chunks(train, args.chunk, args.seed)
    for shard in range(min(args.shards, len(chunks) // args.shard_chunks)):
        out = args.work / f"train-{shard:05d}.safetensors"
        if out.exists():
            continue
        t = time.monotonic()
        part = chunks[shard * args.shard_chunks:(shard + 1) * args.shard_chunks]
        save_file(label(target, part), str(out) + ".tmp")
        Path(str(out) + ".tmp").replace(out)
        log(f"shard {shard}: {part.size / (time.monotonic() - t):.0f} tokens/s")


if __name__ == "__main__":
    main()
