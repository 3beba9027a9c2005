"""Train the feature-conditioned draft on features labelled by engine/training/label_features.py.

    python -m engine.training.train_feature_draft \
        --work /tmp/feat-work --out engine/data/draft-smollm2

Loss per position: KL(target || draft) over the draft's vocabulary (the target's distribution is
its labelled feature times the head) plus a smooth-L1 regression of the feature itself (EAGLE).
With --unroll 2 a second pass feeds the draft its own predicted features, as drafting does from
the second token on. Reads whichever shards exist, so it can run while labelling continues.
Seeded and resumable (checkpoint in --work).
"""
from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

from engine.loading.fetch import model_path
from engine.tokenization import load_tokenizer
from engine.training.checkpoint import load_checkpoint, save_checkpoint
from engine.training.data import corpus, frequent_tokens, log
from engine.training.feature_net import FeatureDraftNet
from engine.loading.formats.load import load_weights


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m engine.training.train_feature_draft", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--work", type=Path, default=Path("/tmp/feat-work"))
    p.add_argument("--out", type=Path, required=True, help="folder for model.safetensors + config.json")
    p.add_argument("--init-layer", type=int, default=29, help="target layer the draft's layer starts from")
    p.add_argument("--vocab", type=int, default=8192, help="output vocabulary: most frequent tokens")
    p.add_argument("--batch", type=int, default=4, help="chunks per step")
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--unroll", type=int, default=2)
    p.add_argument("--reg", type=float, default=1.0, help="weight of the feature regression")
    p.add_argument("--eval-every", type=int, default=100)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def lr_at(step: int, args: argparse.Namespace) -> float:
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    progress = min(1.0, (step - args.warmup) / max(1, args.steps - args.warmup))
    return args.lr * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * progress)))


def unrolled(net: FeatureDraftNet, feats: torch.Tensor, ids: torch.Tensor, steps: int) -> list[torch.Tensor]:
    """Predicted features of f_1..f_{T-1} per unroll step. Step s>0 replaces each input feature
    by the previous step's prediction of it (the first stays the target's)."""
    inputs, out = feats[:, :-1], []
    for _ in range(steps):
        pred = net(inputs, ids[:, 1:])
        out.append(pred)
        inputs = torch.cat([feats[:, :1], pred[:, :-1]], 1)
    return out


def agreement(net: FeatureDraftNet, held: dict[str, torch.Tensor], embed: torch.Tensor,
              head_rows: torch.Tensor, steps: int) -> list[float]:
    """Teacher-forced greedy agreement with the target (full vocabulary) per unroll step."""
    feats, ids = held["features"].float(), held["tokens"].long()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        want = (feats[:, 1:] @ embed.T).argmax(-1)
        preds = unrolled(net, feats, ids, steps)
        return [float((head_rows[net.logits(p).argmax(-1)][:, s:] == want[:, s:]).float().mean())
                for s, p in enumerate(preds)]


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    started = time.monotonic()
    path = model_path("smollm2-135m")
    weights = load_weights(path)
    tokenizer = load_tokenizer(path)
    train, _ = corpus(args.work, tokenizer, min(tokenizer.eos_ids))
    head_rows = frequent_tokens(train, args.vocab, always=set(tokenizer.eos_ids))
    net = FeatureDraftNet(weights.config, weights.tensors, args.init_layer, head_rows)
    embed = weights.tensors["embed"].float()
    held = load_file(args.work / "held.safetensors")
    opt = torch.optim.AdamW(net.params.values(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.0)
    ckpt = args.work / "feature-checkpoint.safetensors"
    step = load_checkpoint(ckpt, net.params, opt) if ckpt.exists() else 0
    log(f"step {step}: agreement {agreement(net, held, embed, head_rows, args.unroll)}")
    meta = {"kind": "feature", "target": path.name, "hidden_size": weights.config.hidden_size,
            "vocab_size": weights.config.vocab_size, "n_layers": 1, "init_layer": args.init_layer,
            "head_rows": args.vocab, "batch": args.batch, "steps": args.steps, "lr": args.lr,
            "unroll": args.unroll, "reg": args.reg, "seed": args.seed,
            "data": "CPython 3.11 standard library (PSF License), files held out by path hash"}
    rng = np.random.default_rng(args.seed + step)
    seen = 0
    while step < args.steps:
        shards = sorted(args.work.glob("train-*.safetensors"))
        shard = load_file(shards[rng.integers(len(shards))])
        pick = torch.from_numpy(rng.choice(len(shard["tokens"]), args.batch, replace=False))
        feats, ids = shard["features"][pick].float(), shard["tokens"][pick].long()
        for group in opt.param_groups:
            group["lr"] = lr_at(step, args)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            target_logp = F.log_softmax(net.logits(feats[:, 1:]).float(), -1)
            loss = torch.zeros(())
            for pred in unrolled(net, feats, ids, args.unroll):
                draft_logp = F.log_softmax(net.logits(pred).float(), -1)
                kl = F.kl_div(draft_logp, target_logp, log_target=True, reduction="none").sum(-1).mean()
                loss = loss + kl + args.reg * F.smooth_l1_loss(pred.float(), feats[:, 1:])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.params.values(), 1.0)
        opt.step()
        step += 1
        seen += ids.numel()
        if step % 10 == 0:
            log(f"step {step}/{args.steps} loss {loss.item():.4f} lr {lr_at(step - 1, args):.2e} "
                f"shards {len(shards)} elapsed {(time.monotonic() - started) / 60:.1f} min")
        if step % args.eval_every == 0 or step == args.steps:
            log(f"step {step}: agreement {agreement(net, held, embed, head_rows, args.unroll)}")
            save_checkpoint(ckpt, net.params, opt, step)
            args.out.mkdir(parents=True, exist_ok=True)
            save_file(net.export() | {"head_rows": head_rows}, str(args.out / "model.safetensors"))
            labelled = len(shards) * len(shard["tokens"]) * ids.shape[1]
            (args.out / "config.json").write_text(json.dumps(
                meta | {"trained_steps": step, "labelled_tokens_read": labelled}, indent=2) + "\n")
    log(f"done in {(time.monotonic() - started) / 60:.1f} min ({seen} tokens this run)")


if __name__ == "__main__":
    main()
