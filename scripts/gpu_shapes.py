"""Pass costs, host work per pass, speed against exllamav2's own generator and exactness of
every decoding mode at the real models' shapes, with random weights made on the device (run by
`scripts/gpu_check.sh --shapes`).

Shapes (Qwen2.5-Coder, qwen2 family: qkv bias, rope theta 1e6): targets 1.5B (tied embeddings)
and 7B (untied), draft 0.5B (tied). Random weights have real pass costs but no real acceptance,
so the drafting policy's tokens per pass come from `scripts/policy_under_costs.py --costs`
run where the real models are. For each GPU backend (torch; exllamav2 where installed):

  1. passes: a pass of 1, 2, 4, 8 and 16 tokens over a --context-token cache (1536), median
     of --repeats (7) after a warm-up, synchronized: `ms` is the backend's `score` and the ids
     greedy verification reads, as decoding calls them, `device_ms` the model's compute inside;
     torch in bf16 (fp16 where the GPU has no bf16), exllamav2 in fp16. torch's `passes` run
     on its static cache, captured as CUDA graphs (the default on CUDA), `passes_eager` on the
     dynamic path; beside them `floor`, the weights read once at a device copy's rate;
  2. every mode (ar, lookup, draft, hybrid) on prompts cut from this checkout's engine/ code,
     lookup drafting from those files, then again from a document holding the greedy output
     itself (drafts right up to where they part): each output must equal plain greedy
     decoding token for token. torch decodes in fp32 here (bf16 rounds a one-token and a wide
     pass differently, so only fp32 output is exact: the engine's rule), captured, and plain
     decoding uncaptured must write the same (`uncaptured_identical`); exllamav2 in fp16. A
     difference records where the outputs part and plain greedy's logit margin there;
  3. host work per target pass: a generation's wall time, its prompt already in the caches,
     less the time inside the target's and the draft's passes, over its target passes;
     p50 over the generations, per mode;
  4. `policy`: per backend and target, without and with the 0.5B draft, whether it verifies
     token trees (`tree`; exllamav2 verifies chains), the costs the drafting policy takes (in
     one-token passes of the target: `width_cost`, what each token more in a pass adds, a
     least-squares slope; `relative_pass_cost`, widths 1..16; `draft_cost`, a one-token pass of
     the draft) and the measured milliseconds, for `policy_under_costs.py --costs`;
  5. `peers`: exllamav2's own dynamic generator (greedy) on the model the exllamav2 backend
     loaded, per target: its tokens/s and whether it writes what our plain decoding writes;
     `speed`: plain decoding's and the default mode's tokens/s (drafts from the greedy output)
     against it (scripts/gpu_peers.py).

exllamav2 reads a Hugging Face folder, so its random models are written to local disk (fp16:
about 3.1 GB at 1.5B, 15 GB at 7B); a shape whose writing and loading would not fit the time
left (--budget-s) is skipped, and the output says so. JSON is written after every step, so a
run cut short keeps what it measured. Exits 1 on any mismatch or error.

--cpu-dry-run runs the same steps at tiny shapes on CPU torch in fp32 (no CUDA, no exllamav2:
its folders are written and read back by the torch backend instead, a plain greedy loop stands
in for its generator, and torch's capture runs with its CPU stand-in). The test suite runs it,
so that the harness works when a GPU is lent.
"""
from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import math
import shutil
import statistics
import sys
import tempfile
import time
import zlib
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import engine  # noqa: E402,F401  (sets OMP_WAIT_POLICY before torch is imported)
import gpu_peers  # noqa: E402  (beside this script)

import numpy as np  # noqa: E402
import torch  # noqa: E402

from engine.api import Request  # noqa: E402
from engine.engine import Engine, pair_draft  # noqa: E402
from engine.execution.backends.base import Backend  # noqa: E402
from engine.execution.backends.torch_llama import TorchLlama  # noqa: E402
from engine.execution.static_passes import StaticCache  # noqa: E402
from engine.loading.architectures import FAMILIES, expand  # noqa: E402
from engine.loading.formats.load import load_weights  # noqa: E402
from engine.loading.weights import LazyTensors, LlamaConfig, LoadedWeights, expected_shapes  # noqa: E402
from engine.models import load_model  # noqa: E402
from engine.tokenization import load_tokenizer  # noqa: E402
from engine.tokenization.tokenizer import Tokenizer  # noqa: E402

_QWEN = dict(rope_theta=1e6, rms_eps=1e-6, max_position=32768, family="qwen2")
SHAPES = {  # Qwen2.5-Coder's config.json values
    "1.5b": LlamaConfig(151936, 1536, 8960, 28, 12, 2, tie_embeddings=True, **_QWEN),
    "7b": LlamaConfig(152064, 3584, 18944, 28, 28, 4, tie_embeddings=False, **_QWEN),
    "0.5b": LlamaConfig(151936, 896, 4864, 24, 14, 2, tie_embeddings=True, **_QWEN),
}
TARGETS, DRAFT = ("1.5b", "7b"), "0.5b"
WIDTHS = (1, 2, 4, 8, 16)
MODES = ("ar", "lookup", "draft", "hybrid")
FOLDER = "torch (hf folder)"  # a dry run's stand-in for exllamav2: the same folder, read by the torch backend
# A dry run's stand-ins (the tokenizer's vocabulary; the same family, tying and head grouping):
# hidden, intermediate, layers, heads, KV heads.
TINY = {"1.5b": (64, 128, 2, 4, 2), "7b": (96, 192, 2, 6, 2), "0.5b": (32, 64, 2, 2, 1)}


# --- random weights ---------------------------------------------------------------------------

def model_shape(name: str, dry: bool, rows_in_use: int) -> LlamaConfig:
    """`name`'s shape, or for a dry run its tiny stand-in with the tokenizer's vocabulary."""
    c = SHAPES[name]
    if not dry:
        return c
    return LlamaConfig(rows_in_use, *TINY[name], c.rope_theta, c.rms_eps, c.max_position, c.tie_embeddings,
                       family=c.family)


def _std(name: str, c: LlamaConfig) -> float:
    """Scales after gpu_check.py's: logits spread widely (no near-ties to flip under rounding),
    activations stay O(1) through the layers (output projections halved)."""
    kind = name.rsplit(".", 1)[-1]
    q = c.n_heads * c.head_dim
    return {"embed": 1.0, "lm_head": 0.25, "bq": 0.1, "bk": 0.1, "bv": 0.1,
            "wo": 0.5 * q ** -0.5, "w_down": 0.5 * c.intermediate_size ** -0.5}.get(kind, c.hidden_size ** -0.5)


def random_weights(c: LlamaConfig, device: str, seed: int, rows_in_use: int) -> LoadedWeights:
    """Seeded random tensors, made on `device` one at a time as the backend reads them (the
    same name always gives the same tensor), so a model never exists twice in memory. Rows of
    the embedding and head past `rows_in_use` (padding: no token has them) are zero, so that no
    backend chooses them (a logit of 0 against a top logit of about 4 standard deviations)."""
    shapes = expected_shapes(c)

    def make(name: str) -> torch.Tensor:
        g = torch.Generator(device=device).manual_seed(seed * 7919 + zlib.crc32(name.encode()))
        t = torch.randn(shapes[name], generator=g, device=device)
        if name in ("embed", "lm_head"):
            t[rows_in_use:] = 0
        return 1 + 0.1 * t if name.endswith("norm") else t * _std(name, c)

    return LoadedWeights(c, LazyTensors(tensor_names(c), make), Path(f"random-{seed}"))


def tensor_names(c: LlamaConfig) -> list[str]:
    """The canonical names of every tensor a model of this shape has."""
    names = list(expand({n: n for n in FAMILIES[c.family].required}, c.n_layers))
    return names + ([] if c.tie_embeddings else ["lm_head"])


def write_hf_folder(weights: LoadedWeights, folder: Path, tokenizer_dir: Path) -> Path:
    """The random model as an fp16 Hugging Face folder (a safetensors file per layer)."""
    from safetensors.torch import save_file

    c = weights.config
    hf = expand(FAMILIES[c.family].names("hf"), c.n_layers)
    folder.mkdir(parents=True, exist_ok=True)
    groups: dict[str, list[str]] = {}
    for name in weights.tensors:
        groups.setdefault(name.split(".")[1] if name.startswith("layers.") else "rest", []).append(name)
    for group, names in groups.items():
        save_file({hf[n]: weights.tensors[n].half().cpu().contiguous() for n in names},
                  str(folder / f"model-{group}.safetensors"))
    config = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": c.vocab_size,
              "hidden_size": c.hidden_size, "intermediate_size": c.intermediate_size,
              "num_hidden_layers": c.n_layers, "num_attention_heads": c.n_heads,
              "num_key_value_heads": c.n_kv_heads, "rope_theta": c.rope_theta, "rms_norm_eps": c.rms_eps,
              "max_position_embeddings": c.max_position, "tie_word_embeddings": c.tie_embeddings,
              "hidden_act": "silu", "torch_dtype": "float16", "use_sliding_window": False}
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    shutil.copy(tokenizer_dir / "tokenizer.json", folder / "tokenizer.json")
    return folder


# --- timing -------------------------------------------------------------------------------------

class Meter:
    """Seconds spent inside wrapped calls (synchronized on CUDA, so a call's device work is
    inside it), summed: what a generation spent in the models' passes."""

    def __init__(self, cuda: bool):
        self.sync: Callable[[], None] = torch.cuda.synchronize if cuda else (lambda: None)
        self.seconds = 0.0

    def wrap(self, owner: object, method: str) -> None:
        inner = getattr(owner, method)

        def timed(*args, **kwargs):
            self.sync()
            start = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                self.sync()
                self.seconds += time.perf_counter() - start

        setattr(owner, method, timed)


def time_passes(backend: Backend, device: Meter, context: list[int], widths: tuple[int, ...],
                repeats: int) -> dict[str, dict[str, float]]:
    """Median milliseconds of a pass of each width over the `context` cache: `ms` of `score`
    and the argmax ids greedy verification reads from it (the logits stay on the device),
    `device_ms` of the compute inside it (the `device` meter's)."""
    backend.truncate(0)
    backend.sync(context)
    out = {}
    for width in widths:
        walls, inside = [], []
        for _ in range(repeats + 1):  # the first pass of a shape pays its set-up
            backend.truncate(len(context))
            device.sync()
            before, start = device.seconds, time.perf_counter()
            backend.score(context[:width]).argmax()
            device.sync()
            walls.append(time.perf_counter() - start)
            inside.append(device.seconds - before)
        out[str(width)] = {"ms": round(1000 * statistics.median(walls[1:]), 4),
                           "device_ms": round(1000 * statistics.median(inside[1:]), 4)}
    backend.truncate(0)
    return out


def pass_cost_seconds(passes: dict[str, dict[str, float]]) -> list[float]:
    """Seconds by width up to the widest timed (index = tokens; [0] unused), linear between the
    timed widths: the list PassCosts takes (it extrapolates linearly past it)."""
    xs = [int(w) for w in passes]
    ys = [passes[w]["ms"] / 1000 for w in passes]
    return [0.0] + [float(np.interp(w, xs, ys)) for w in range(1, xs[-1] + 1)]


def policy_costs(passes: dict, draft_ms: float | None) -> dict:
    """The drafting policy's inputs, in one-token passes of the target."""
    one = passes["1"]["ms"]
    relative = [c / (one / 1000) for c in pass_cost_seconds(passes)[1:]]
    extra = [(int(w) - 1, p["ms"] / one - 1) for w, p in passes.items() if int(w) > 1]
    width_cost = sum(x * y for x, y in extra) / sum(x * x for x, _ in extra)
    return {"one_token_pass_ms": one, "relative_pass_cost": [round(r, 4) for r in relative],
            "width_cost": round(width_cost, 5),
            "draft_cost": None if draft_ms is None else round(draft_ms / one, 5)}


# --- generations --------------------------------------------------------------------------------

def code_prompts(tokenizer: Tokenizer, count: int, length: int) -> tuple[list[list[int]], dict[str, str]]:
    """`count` prompts of `length` tokens cut from this checkout's engine/ sources, and those
    sources (what lookup drafts from)."""
    files = {str(p.relative_to(ROOT)): p.read_text() for p in sorted((ROOT / "engine").rglob("*.py"))}
    stream = tokenizer.encode("\n".join(files.values()))
    step = max(length, (len(stream) - length) // count)
    return [stream[i * step:i * step + length] for i in range(count)], files


def generations(eng: Engine, meter: Meter, prompts: list[list[int]], new_tokens: int
                ) -> tuple[list[dict], list[list[int]]]:
    """Every mode on every prompt, compared with plain greedy; host work per target pass and
    tokens/s. Also returns plain greedy's tokens, per prompt."""
    rows, greedy_outputs = [], []
    request = Request(max_new_tokens=new_tokens)

    def run(prompt: list[int], mode: str, document: str) -> dict:
        eng.prefill(prompt)  # the prompt in the caches: the generation is decoding alone
        before, start = meter.seconds, time.perf_counter()
        out = eng.complete(prompt, request, mode)
        wall = time.perf_counter() - start
        passes = out.stats.target_passes
        return {"mode": mode, "document": document, "tokens": out.tokens, "target_passes": passes,
                "tokens_per_pass": round(len(out.tokens) / max(passes, 1), 3),
                "tokens_per_s": round(len(out.tokens) / wall, 2),
                "host_ms_per_pass": round(1000 * (wall - (meter.seconds - before)) / max(passes, 1), 4)}

    for i, prompt in enumerate(prompts):
        plain = run(prompt, "ar", "none")
        greedy = plain.pop("tokens")
        greedy_outputs.append(greedy)
        rows.append(plain | {"prompt": i, "identical": True})
        for document in ("none", "greedy output"):
            if document != "none":  # drafts right until the output parts from them
                eng.lookup.set_document("greedy output", prompt + greedy)
            for mode in MODES[1:]:
                row = run(prompt, mode, document)
                tokens = row.pop("tokens")
                rows.append(row | {"prompt": i, "identical": tokens == greedy}
                            | ({} if tokens == greedy else difference(eng.target, prompt, greedy, tokens)))
            eng.lookup.remove_document("greedy output")
    return rows, greedy_outputs


def plain_decoding(target: Backend, tokenizer: Tokenizer, prompts: list[list[int]], new_tokens: int
                   ) -> list[list[int]]:
    """Plain greedy decoding's tokens on each prompt."""
    eng = Engine(target, tokenizer)
    return [eng.complete(prompt, Request(max_new_tokens=new_tokens), "ar").tokens for prompt in prompts]


def compute_of(model: Backend) -> tuple[object, str]:
    """What a pass's compute runs in, for the device meter: a torch model's graphs (its static
    passes) or layers, exllamav2's forward_chunk."""
    if isinstance(model, TorchLlama):
        return (model.graphs, "run") if model.graphs is not None else (model, "forward_hidden")
    return model.model, "forward_chunk"


def difference(target: Backend, prompt: list[int], greedy: list[int], tokens: list[int]) -> dict:
    """Where an output parts from plain greedy's, and by how much plain greedy's token led the
    other in a one-token pass there: a near-tie (fp16 rounds a wide pass otherwise than a
    one-token pass) or a fault."""
    first = next((j for j, (a, b) in enumerate(zip(tokens, greedy)) if a != b), min(len(tokens), len(greedy)))
    if first == min(len(tokens), len(greedy)):  # one output ended (end of text) where the other went on
        return {"first_difference": first, "logit_margin": None}
    context = prompt + greedy[:first]
    target.sync(context[:-1])
    logits = target.forward(context[-1:])[-1]
    return {"first_difference": first, "logit_margin": round(float(logits[greedy[first]] - logits[tokens[first]]), 5)}


def host_p50(rows: list[dict], modes: tuple[str, ...]) -> dict[str, float]:
    return {m: round(statistics.median(r["host_ms_per_pass"] for r in rows if r["mode"] == m), 4)
            for m in modes if any(r["mode"] == m for r in rows)}


# --- the run ------------------------------------------------------------------------------------

class Run:
    """One device check: builds each model, measures, and writes the JSON after every step."""

    def __init__(self, args: argparse.Namespace, tokenizer: Tokenizer, tokenizer_dir: Path):
        self.args, self.tokenizer, self.tokenizer_dir = args, tokenizer, tokenizer_dir
        self.cuda = not args.cpu_dry_run
        self.device = "cuda" if self.cuda else "cpu"
        self.started = time.monotonic()
        self.rows_in_use = min(tokenizer.vocab_size, tokenizer.tokens_in_use)
        self.shapes = {n: model_shape(n, args.cpu_dry_run, self.rows_in_use) for n in SHAPES}
        # the dtype passes are timed in, and the draft decodes in (torch's default on the device)
        if self.cuda:
            self.dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        else:
            self.dtype = torch.float32
        self.context = np.random.default_rng(0).integers(0, self.rows_in_use, args.context).tolist()
        self.prompts, self.documents = code_prompts(tokenizer, args.prompts, args.context)
        self.draft_ms = 0.0
        self.result = {
            "device": torch.cuda.get_device_name() if self.cuda else "cpu (dry run)",
            "torch": torch.__version__, "dry_run": args.cpu_dry_run, "context": args.context,
            "new_tokens": args.new_tokens, "prompts": len(self.prompts),
            "timing_dtype": {"torch": _name(self.dtype), "exllamav2": "float16"},
            "decoding_dtype": {"torch": "float32", "exllamav2": "float16", "draft": _name(self.dtype)},
            "shapes": {n: {k: v for k, v in vars(c).items() if k not in ("rope_scaling", "sliding_window")}
                       for n, c in self.shapes.items()},
            "copy_gb_s": None, "floor": {}, "backends": {}, "peers": {}, "speed": [], "policy": [],
            "skipped": [], "errors": []}

    def left(self) -> float:
        return self.args.budget_s - (time.monotonic() - self.started)

    def save(self) -> None:
        entries = [t for b in self.result["backends"].values() for t in b.values()]
        rows = [r for t in entries for r in t.get("generations", [])]
        self.result["speed"] = gpu_peers.speed(self.result["backends"], self.result["peers"])
        self.result["ok"] = (not self.result["errors"] and all(r["identical"] for r in rows)
                             and all(t.get("uncaptured_identical", True) for t in entries)
                             and all(p["identical"] for p in self.result["peers"].values()))
        self.args.out.parent.mkdir(parents=True, exist_ok=True)
        self.args.out.write_text(json.dumps(self.result, indent=1))

    def step(self, label: str, work: Callable[[], None]) -> None:
        """Run one step; an error is recorded and the run goes on with the next step."""
        print(f"== {label} ({self.left():.0f} s left)", file=sys.stderr, flush=True)
        try:
            work()
        except Exception as exc:  # noqa: BLE001  (the other steps still measure)
            self.result["errors"].append(f"{label}: {type(exc).__name__}: {exc}")
            print(f"   error: {type(exc).__name__}: {exc}", file=sys.stderr)
        finally:
            self._free()
        self.save()

    def weights(self, shape: str) -> LoadedWeights:
        return random_weights(self.shapes[shape], self.device, seed=len(shape), rows_in_use=self.rows_in_use)

    def torch_model(self, shape: str, dtype: torch.dtype, captured: bool = True) -> TorchLlama:
        """On the static cache, captured (a dry run: the CPU stand-in for capture), or eager on
        the dynamic path."""
        static = StaticCache(stand_in=not self.cuda) if captured else False
        model = TorchLlama(self.weights(shape), dtype, max_len=self.args.max_len, device=self.device, static=static)
        model.limit_vocab(self.rows_in_use)
        return model

    def time_model(self, model: Backend, widths: tuple[int, ...] = WIDTHS) -> dict:
        device = Meter(self.cuda)
        device.wrap(*compute_of(model))
        return time_passes(model, device, self.context, widths, self.args.repeats)

    def floor(self, shape: str, weight_bytes: int) -> None:
        """The weights read once at the device copy's rate (measured once)."""
        if self.result["copy_gb_s"] is None:
            self.result["copy_gb_s"] = round(gpu_peers.copy_rate(self.device) / 1e9, 2)
        self.result["floor"][shape] = {"weight_gb": round(weight_bytes / 1e9, 3),
                                       "ms": gpu_peers.floor_ms(weight_bytes, self.result["copy_gb_s"] * 1e9)}

    def decode(self, backend: str, shape: str, target: Backend, passes: dict) -> list[list[int]]:
        """Every mode on `target` with the draft; the policy's inputs with and without it.
        Returns plain greedy's tokens, per prompt."""
        meter = Meter(self.cuda)
        draft = self.torch_model(DRAFT, self.dtype)
        for model in (target, draft):  # decoding and drafting read logits through `score`
            meter.wrap(model, "forward")
            meter.wrap(model, "score")
        eng = Engine(target, self.tokenizer, pair_draft(target, self.tokenizer, draft, self.tokenizer),
                     pass_cost=pass_cost_seconds(passes), draft_cost=self.draft_ms / 1000)
        for doc_id, text in self.documents.items():
            eng.set_document(doc_id, text)
        rows, greedy = generations(eng, meter, self.prompts, self.args.new_tokens)
        self.result["backends"][backend][shape]["generations"] = rows
        for with_draft in (False, True):
            modes = ("ar", "draft", "hybrid") if with_draft else ("ar", "lookup")
            self.result["policy"].append(
                {"backend": backend, "target": shape, "draft": DRAFT if with_draft else None,
                 "tree": target.capabilities.tree}
                | policy_costs(passes, self.draft_ms if with_draft else None)
                | {"pass_ms": {w: p["ms"] for w, p in passes.items()},
                   "draft_pass_ms": self.draft_ms if with_draft else None,
                   "host_ms_per_pass": host_p50(rows, modes)})
        return greedy

    def time_draft(self) -> None:
        draft = self.torch_model(DRAFT, self.dtype)
        passes = self.time_model(draft, (1,))
        self.result["draft_passes"] = passes
        self.draft_ms = passes["1"]["ms"]

    def _free(self) -> None:
        gc.collect()
        if self.cuda:
            torch.cuda.empty_cache()

    def run_torch(self, shape: str) -> None:
        """Passes timed in the device's dtype, eager then captured; decoding checked in fp32,
        captured (a third build), and plain decoding without capture on the same model."""
        eager = self.torch_model(shape, self.dtype, captured=False)
        passes_eager = self.time_model(eager)
        self.floor(shape, eager.weight_bytes)
        del eager
        self._free()
        captured = self.torch_model(shape, self.dtype)
        passes = self.time_model(captured)
        entry = self.result["backends"].setdefault("torch", {})[shape] = {
            "passes": passes, "passes_eager": passes_eager, "captured_passes": captured.graphs.captured}
        del captured
        self._free()
        target = self.torch_model(shape, torch.float32)
        greedy = self.decode("torch", shape, target, passes)
        graphs, target.graphs = target.graphs, None  # the dynamic path, on the same cache
        entry["uncaptured_identical"] = plain_decoding(target, self.tokenizer, self.prompts,
                                                       self.args.new_tokens) == greedy
        target.graphs = graphs

    def run_folder(self, backend: str, shape: str) -> None:
        """exllamav2 reads a Hugging Face folder: the random model is written as one (fp16) and
        loaded from it. A dry run loads the folder with the torch backend in fp32 instead."""
        folder = Path(tempfile.mkdtemp(prefix=f"gpu_shapes_{shape}_", dir=self.args.work_dir))
        try:
            write_hf_folder(self.weights(shape), folder, self.tokenizer_dir)
            if backend == "exllamav2":
                target, _ = load_model(folder, None, "exllamav2", max_len=self.args.max_len)
            else:
                target = TorchLlama(load_weights(folder), torch.float32, max_len=self.args.max_len)
                target.limit_vocab(self.rows_in_use)
            passes = self.time_model(target)
            self.result["backends"].setdefault(backend, {})[shape] = {"passes": passes}
            greedy = self.decode(backend, shape, target, passes)
            generate = gpu_peers.exllamav2_generation if backend == "exllamav2" else gpu_peers.plain_greedy_loop
            self.result["peers"][shape] = gpu_peers.peer_runs(generate, target, self.prompts, greedy,
                                                              self.args.new_tokens, set(self.tokenizer.eos_ids))
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def folder_fits(self, shape: str) -> bool:
        """Whether writing, loading and measuring `shape`'s fp16 folder fits the time left."""
        c = self.shapes[shape]
        shapes = expected_shapes(c)
        gb = 2 * sum(math.prod(shapes[name]) for name in tensor_names(c)) / 1e9
        need = 60 + gb * self.args.seconds_per_gb
        if self.left() >= need:
            return True
        self.result["skipped"].append(f"exllamav2 {shape}: writing, loading and measuring its {gb:.1f} GB fp16 "
                                      f"folder needs about {need:.0f} s; {self.left():.0f} s were left")
        return False

    def all(self) -> None:
        self.step(f"torch: draft {DRAFT} one-token pass", self.time_draft)
        for shape in TARGETS:
            self.step(f"torch: {shape}", lambda shape=shape: self.run_torch(shape))
        if not self.cuda:
            self.result["skipped"].append(f"exllamav2: a dry run has no CUDA; its folders are loaded by {FOLDER}")
            folder_backend = FOLDER
        else:
            from engine.execution.backends.exllamav2 import unavailable_reason

            reason = "--no-exllamav2" if self.args.no_exllamav2 else unavailable_reason(
                torch.version.cuda, True, importlib.util.find_spec("exllamav2") is not None)
            if reason:
                self.result["skipped"].append(f"exllamav2: {reason}")
            folder_backend = None if reason else "exllamav2"
        for shape in TARGETS if folder_backend else ():
            if self.folder_fits(shape):
                self.step(f"{folder_backend}: {shape}", lambda shape=shape: self.run_folder(folder_backend, shape))
        self.save()


def print_tables(result: dict) -> None:
    """Pass costs (ms by width) beside the peer's token and the floor; speed against the peer."""
    print(f"pass ms by width {WIDTHS}; peer ms/token; floor ms (copy {result['copy_gb_s']} GB/s)", file=sys.stderr)
    for backend, targets in result["backends"].items():
        for shape, entry in targets.items():
            peer = (result["peers"].get(shape) or {}).get("ms_per_token")
            floor = (result["floor"].get(shape) or {}).get("ms")
            for label in ("passes", "passes_eager"):
                if label in entry:
                    ms = " ".join(f"{entry[label][str(w)]['ms']:8.3f}" for w in WIDTHS)
                    print(f"  {backend:17} {shape:4} {label:12} {ms}   peer {peer}  floor {floor}", file=sys.stderr)
    for row in result["speed"]:
        print("  " + ", ".join(f"{k} {v}" for k, v in row.items()), file=sys.stderr)


def _name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def export_tokenizer(model: str, folder: Path) -> Path:
    """Write `model`'s tokenizer as `folder`/tokenizer.json (needs the model here, not on the GPU box)."""
    from engine.loading.fetch import model_path

    folder.mkdir(parents=True, exist_ok=True)
    load_tokenizer(model_path(model)).save(folder / "tokenizer.json")
    return folder


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cpu-dry-run", action="store_true", help="tiny shapes on CPU torch, fp32")
    p.add_argument("--tokenizer", type=Path,
                   help="a folder with tokenizer.json (default: export the embedded model's)")
    p.add_argument("--export-tokenizer", type=Path, metavar="FOLDER", help="only write --model's tokenizer here")
    p.add_argument("--model", default="qwen2.5-coder-1.5b", help="whose tokenizer --export-tokenizer writes")
    p.add_argument("--out", type=Path, default=Path("/tmp/gpu_shapes/gpu_shapes.json"))
    p.add_argument("--context", type=int,
                   help="cache length of the timed passes, and prompt length (1536; dry run 96)")
    p.add_argument("--new-tokens", type=int, help="tokens per generation (32; dry run 12)")
    p.add_argument("--prompts", type=int, help="prompts per backend and shape (3; dry run 2)")
    p.add_argument("--repeats", type=int, help="timed passes per width, the median kept (7; dry run 3)")
    p.add_argument("--budget-s", type=float, default=420, help="seconds this run may take")
    p.add_argument("--seconds-per-gb", type=float, default=5.0,
                   help="estimated seconds to write and load a GB of an exllamav2 folder")
    p.add_argument("--no-exllamav2", action="store_true", help="measure the torch backend only")
    p.add_argument("--work-dir", type=Path, help="where exllamav2's folders are written (default: the temp dir)")
    p.add_argument("--write-folder", type=Path, metavar="FOLDER",
                   help="only write the random 1.5B (dry run: its tiny stand-in) as a Hugging Face folder "
                        "with --tokenizer's tokenizer.json here, for bench (scripts/gpu_check.sh --pauses)")
    args = p.parse_args()
    if args.export_tokenizer:
        print(export_tokenizer(args.model, args.export_tokenizer))
        return 0
    if args.write_folder:
        tokenizer_dir = args.tokenizer or export_tokenizer("smollm2-135m", Path(tempfile.mkdtemp(prefix="gpu_shapes_")))
        tokenizer = load_tokenizer(tokenizer_dir)
        rows = min(tokenizer.vocab_size, tokenizer.tokens_in_use)
        weights = random_weights(model_shape("1.5b", args.cpu_dry_run, rows), "cuda" if torch.cuda.is_available()
                                 else "cpu", 0, rows)
        print(write_hf_folder(weights, args.write_folder, tokenizer_dir))
        return 0
    if not args.cpu_dry_run and not torch.cuda.is_available():
        print("gpu_shapes: no CUDA device (use --cpu-dry-run to test the harness)", file=sys.stderr)
        return 2
    dry = args.cpu_dry_run
    args.context = args.context or (96 if dry else 1536)
    args.new_tokens = args.new_tokens or (12 if dry else 32)
    args.prompts = args.prompts or (2 if dry else 3)
    args.repeats = args.repeats or (3 if dry else 7)
    # a multiple of 256: exllamav2's generator pages its cache in 256-token pages
    args.max_len = -(-(args.context + args.new_tokens + 2 * Engine.MAX_NODES + 64) // 256) * 256
    tokenizer_dir = args.tokenizer or export_tokenizer("smollm2-135m", Path(tempfile.mkdtemp(prefix="gpu_shapes_")))
    run = Run(args, load_tokenizer(tokenizer_dir), tokenizer_dir)
    run.all()
    result = run.result
    print_tables(result)
    for entry in result["policy"]:
        print(f"{entry['backend']:9} {entry['target']:4} draft {entry['draft'] or '-':4}  one-token pass "
              f"{entry['one_token_pass_ms']:.3f} ms, width cost {entry['width_cost']:.4f}, draft cost "
              f"{entry['draft_cost']}, host ms per pass {entry['host_ms_per_pass']}", file=sys.stderr)
    for line in result["skipped"] + result["errors"]:
        print(f"   {line}", file=sys.stderr)
    print(f"== gpu_shapes: {'PASS' if result['ok'] else 'FAIL'} ({args.out})", file=sys.stderr)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
