"""Distil the embedded draft model from the target on the CPython standard library.

    OMP_WAIT_POLICY=PASSIVE python -m engine.training.distill --out engine/data/draft-smollm2

Labels are the target's own next-token distributions (bf16, computed on the fly, restricted to
the draft's vocabulary), so the draft learns to agree with the target. A target pass costs about
four draft training passes, so each step also trains on plain text (next-token cross-entropy):
more tokens for the same time.
Seeded and resumable: the work folder keeps the tokenized corpus and a checkpoint.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

from engine.backends.torch_llama import TorchLlama
from engine.models import embedded_target_path
from engine.tokenizer import Tokenizer
from engine.training.data import chunk_starts, frequent_tokens, stdlib_files, tokenize_files
from engine.training.draft_net import DraftNet
from engine.weights import load_weights


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m engine.training.distill", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True, help="folder for model.safetensors + config.json")
    p.add_argument("--work", type=Path, default=Path("/tmp/draft-work"), help="corpus cache and checkpoint")
    p.add_argument("--layers", default="0,1", help="target layers the draft's layers start from")
    p.add_argument("--vocab", type=int, default=8192, help="output vocabulary: most frequent tokens")
    p.add_argument("--chunk", type=int, default=512)
    p.add_argument("--batch", type=int, default=1, help="chunks per step labelled by the target")
    p.add_argument("--text-chunks", type=int, default=3,
                   help="extra chunks per step trained on the text's next token (no target pass)")
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--lr", type=float, default=6e-4)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--eval-every", type=int, default=20)
    p.add_argument("--eval-chunks", type=int, default=8)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def corpus(work: Path, tokenizer: Tokenizer, separator: int) -> tuple[np.ndarray, np.ndarray]:
    """(training stream, held-out stream), tokenized once and cached in `work`."""
    cache = work / "tokens.npz"
    if cache.exists():
        data = np.load(cache, allow_pickle=False)
        return data["train"], data["held"]
    train_files, held_files = stdlib_files()
    log(f"tokenizing {len(train_files)} training and {len(held_files)} held-out files")
    train = tokenize_files(train_files, tokenizer, separator)
    held = tokenize_files(held_files, tokenizer, separator)
    np.savez(cache, train=train, held=held)
    return train, held


def teacher(target: TorchLlama, chunks: torch.Tensor, head_rows: torch.Tensor
            ) -> tuple[torch.Tensor, torch.Tensor]:
    """The target's log-probabilities over head_rows [B, T, R] and its full-vocabulary argmax [B, T]."""
    logps, top = [], []
    for ids in chunks.tolist():
        target.truncate(0)
        logits = target.forward(ids)
        top.append(logits.argmax(-1))
        logps.append(F.log_softmax(logits[:, head_rows], -1))
    return torch.stack(logps), torch.stack(top)


def agreement(net: DraftNet, chunks: torch.Tensor, top: torch.Tensor, head_rows: torch.Tensor) -> float:
    """Teacher-forced greedy agreement: draft argmax == target argmax (full vocabulary)."""
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        pred = head_rows[net(chunks).argmax(-1)]
    return float((pred == top).float().mean())


def lr_at(step: int, args: argparse.Namespace) -> float:
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    progress = (step - args.warmup) / max(1, args.steps - args.warmup)
    return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def save_checkpoint(path: Path, net: DraftNet, opt: torch.optim.Optimizer, step: int) -> None:
    tensors = {f"param.{k}": v.detach() for k, v in net.params.items()}
    for k, v in net.params.items():
        for field in ("exp_avg", "exp_avg_sq"):
            if v in opt.state:
                tensors[f"opt.{field}.{k}"] = opt.state[v][field]
    save_file(tensors, str(path) + ".tmp", metadata={"step": str(step)})
    Path(str(path) + ".tmp").replace(path)


def load_checkpoint(path: Path, net: DraftNet, opt: torch.optim.Optimizer) -> int:
    from safetensors import safe_open

    with safe_open(str(path), "pt") as f:
        step = int(f.metadata()["step"])
    tensors = load_file(path)
    with torch.no_grad():
        for k, v in net.params.items():
            v.copy_(tensors[f"param.{k}"])
            if f"opt.exp_avg.{k}" in tensors:
                opt.state[v] = {"step": torch.tensor(float(step)),
                                "exp_avg": tensors[f"opt.exp_avg.{k}"],
                                "exp_avg_sq": tensors[f"opt.exp_avg_sq.{k}"]}
    return step


def export(out: Path, net: DraftNet, head_rows: torch.Tensor, meta: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    save_file(net.export() | {"head_rows": head_rows}, str(out / "model.safetensors"))
    (out / "config.json").write_text(json.dumps(meta, indent=2) + "\n")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    args.work.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()

    path = embedded_target_path()
    weights = load_weights(path)
    tokenizer = Tokenizer.from_gguf_metadata(weights.gguf_metadata, path)
    separator = min(tokenizer.eos_ids)
    target = TorchLlama(weights, torch.bfloat16, max_len=args.chunk)
    train, held = corpus(args.work, tokenizer, separator)
    head_rows = frequent_tokens(train, args.vocab, always=set(tokenizer.eos_ids))
    coverage = float(np.isin(held, head_rows.numpy()).mean())
    log(f"corpus: {len(train)} training / {len(held)} held-out tokens; "
        f"{args.vocab}-token vocabulary covers {coverage:.1%} of held-out tokens")

    row_of = torch.full((weights.config.vocab_size,), -100, dtype=torch.long)
    row_of[head_rows] = torch.arange(len(head_rows))
    init_layers = [int(i) for i in args.layers.split(",")]
    net = DraftNet(weights.config, weights.tensors, init_layers, head_rows)
    opt = torch.optim.AdamW(net.params.values(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.0)
    ckpt = args.work / "checkpoint.safetensors"
    step = load_checkpoint(ckpt, net, opt) if ckpt.exists() else 0
    if step:
        log(f"resumed at step {step}")

    rng = np.random.default_rng(args.seed)
    starts = chunk_starts(len(train), args.chunk)[rng.permutation(len(chunk_starts(len(train), args.chunk)))]
    held_starts = chunk_starts(len(held), args.chunk)
    held_starts = held_starts[np.linspace(0, len(held_starts) - 1, args.eval_chunks).astype(int)]
    to_chunks = lambda stream, offs: torch.from_numpy(  # noqa: E731
        np.stack([stream[s:s + args.chunk] for s in offs]).astype(np.int64))
    eval_ids = to_chunks(held, held_starts)
    _, eval_top = teacher(target, eval_ids, head_rows)
    # Training needs only the draft's vocabulary: a restricted head saves a fifth of each pass.
    target = TorchLlama(weights, torch.bfloat16, max_len=args.chunk, head_rows=head_rows)
    log(f"agreement at step {step}: {agreement(net, eval_ids, eval_top, head_rows):.4f}")

    meta = {"target": path.name, "hidden_size": weights.config.hidden_size,
            "vocab_size": weights.config.vocab_size, "n_layers": len(init_layers),
            "init_layers": init_layers, "head_rows": args.vocab, "chunk": args.chunk,
            "batch": args.batch, "text_chunks": args.text_chunks, "steps": args.steps, "lr": args.lr, "seed": args.seed,
            "data": "CPython 3.11 standard library (PSF License), files held out by path hash"}
    while step < args.steps:
        t0 = time.monotonic()
        per_step = args.batch + args.text_chunks
        ids = to_chunks(train, [starts[(step * per_step + i) % len(starts)] for i in range(per_step)])
        teacher_logp, _ = teacher(target, ids[:args.batch], head_rows)
        t1 = time.monotonic()
        for group in opt.param_groups:
            group["lr"] = lr_at(step, args)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = net(ids).float()
        student_logp = F.log_softmax(logits[:args.batch], -1)
        loss = F.kl_div(student_logp, teacher_logp, log_target=True, reduction="none").sum(-1).mean()
        if args.text_chunks:
            labels = row_of[ids[args.batch:, 1:]]  # -100 where the next token is outside head_rows
            loss = loss + F.cross_entropy(logits[args.batch:, :-1].flatten(0, 1), labels.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.params.values(), 1.0)
        opt.step()
        step += 1
        log(f"step {step}/{args.steps} loss {loss.item():.4f} lr {lr_at(step - 1, args):.2e} "
            f"teacher {t1 - t0:.1f}s student {time.monotonic() - t1:.1f}s "
            f"elapsed {(time.monotonic() - started) / 60:.1f} min")
        if step % args.eval_every == 0 or step == args.steps:
            log(f"agreement at step {step}: {agreement(net, eval_ids, eval_top, head_rows):.4f}")
            save_checkpoint(ckpt, net, opt, step)
            export(args.out, net, head_rows, meta | {"trained_steps": step,
                                                     "target_labelled_tokens": step * args.batch * args.chunk,
                                                     "text_tokens": step * args.text_chunks * args.chunk})
    log(f"done in {(time.monotonic() - started) / 60:.1f} min")


if __name__ == "__main__":
    main()
