"""Other engines on the same weights and tasks: Hugging Face transformers, llama.cpp through
llama-cpp-python, and llama.cpp's own llama-server (plain, and speculative with a draft model).

Each peer is optional: it runs only when its library is importable or its program found. The
llama.cpp peers run in processes of their own with the user's environment (peer_env.py). Each is a contender of
runner.py: it gets the same prompt token ids, greedy decoding, the same token limit and
end-of-text tokens as our modes, and, like them, either a prefilled prompt before the clock
starts (warm: the timings compare decoding alone) or an empty cache (cold: the prefill is
timed too).
"""
from __future__ import annotations

import atexit
import importlib.util
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from engine.errors import EngineError
from lsp_server.bench.llama_server import LlamaServer, ServerUnavailable, find_binary
from lsp_server.bench.peer_env import peer_environment
from lsp_server.bench.report import Run

PEER_MODES = ("hf-ar", "hf-lookup", "hf-assisted", "llamacpp", "llama-server", "llama-server-spec")
HF_LOOKUP_TOKENS = 10  # the value Hugging Face's documentation suggests
_LIBRARY = {"hf-ar": "transformers", "hf-lookup": "transformers", "hf-assisted": "transformers",
            "llamacpp": "llama_cpp"}
_INSTALL = {"transformers": "pip install 'draftline[peers]' (transformers, accelerate)",
            "llama_cpp": "pip install llama-cpp-python"}

# (prompt ids, max new tokens, cold) -> the timed run, less its task index
RunPeer = Callable[[list[int], int, bool], Run]
Decode = Callable[[list[int]], str]


class Peer:
    """A peer library as a contender (runner.py)."""

    def __init__(self, mode: str, run: RunPeer):
        self.mode, self.run = mode, run


class PeerUnavailable(Exception):
    pass


def check_peer(mode: str, model: Path, draft: Path | None) -> None:
    """Raise PeerUnavailable with one clear sentence if `mode` cannot run here."""
    library = _LIBRARY.get(mode)
    if library is None:  # a program, not a library
        try:
            find_binary()
        except ServerUnavailable as exc:
            raise PeerUnavailable(f"{mode}: {exc}") from None
    elif importlib.util.find_spec(library) is None:
        raise PeerUnavailable(f"{mode} needs {library}, which is not installed: {_INSTALL[library]}")
    if mode == "hf-assisted" and (draft is None or not draft.exists()):
        raise PeerUnavailable("hf-assisted needs an assistant model that transformers can load: "
                              "give --draft a .gguf file or a model folder")
    if mode.startswith("hf-") and model.suffix == ".gguf" and importlib.util.find_spec("accelerate") is None:
        raise PeerUnavailable(f"{mode} loads a GGUF through transformers, which then needs accelerate: "
                              "pip install accelerate")
    if mode.startswith("llama") and model.suffix != ".gguf":
        raise PeerUnavailable(f"{mode} needs a .gguf model")
    if mode == "llama-server-spec" and (draft is None or draft.suffix != ".gguf" or not draft.exists()):
        raise PeerUnavailable("llama-server-spec needs a draft model in a .gguf file: give --draft")


def _hf_load(path: Path, dtype):
    from transformers import AutoModelForCausalLM

    if path.is_dir():
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    else:  # dequantizes the GGUF, as our loader does
        model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=dtype)
    return model.eval()


def _strip_eos(tokens: list[int], eos_ids: frozenset[int]) -> list[int]:
    return tokens[:-1] if tokens and tokens[-1] in eos_ids else tokens


def _hf_peer(model, eos_ids: frozenset[int], decode: Decode, **generate_args) -> RunPeer:
    import torch

    passes = [0]
    model.register_forward_pre_hook(lambda *_: passes.__setitem__(0, passes[0] + 1))

    @torch.inference_mode()
    def run(prompt: list[int], max_new_tokens: int, cold: bool) -> Run:
        ids = torch.tensor([prompt])
        # warm: the untimed prefill; cold: generate prefills on the clock
        cache = None if cold else model(ids[:, :-1], use_cache=True).past_key_values
        passes[0] = 0
        start = time.perf_counter()
        out = model.generate(ids, attention_mask=torch.ones_like(ids), cache=cache,
                             max_new_tokens=max_new_tokens, do_sample=False, temperature=None,
                             top_p=None, top_k=None, eos_token_id=sorted(eos_ids),
                             pad_token_id=min(eos_ids), **generate_args)
        ms = (time.perf_counter() - start) * 1000
        new = out[0, len(prompt):].tolist()
        tokens = _strip_eos(new, eos_ids)
        return Run(-1, "", tokens, decode(tokens), ms, len(new), passes[0] - cold)  # less the prefill

    return run


def _threads() -> int:
    return len(os.sched_getaffinity(0))


def _llamacpp_peer(path: Path, eos_ids: frozenset[int], decode: Decode) -> RunPeer:
    """llama-cpp-python in its own process (llamacpp_worker.py), one thread per core."""
    worker = subprocess.Popen([sys.executable, str(Path(__file__).with_name("llamacpp_worker.py")), str(path),
                               str(_threads())], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              env=peer_environment())
    atexit.register(worker.kill)

    def run(prompt: list[int], max_new_tokens: int, cold: bool) -> Run:
        worker.stdin.write(json.dumps({"prompt": prompt, "max_new_tokens": max_new_tokens, "cold": cold,
                                       "eos": sorted(eos_ids)}) + "\n")
        worker.stdin.flush()
        answer = worker.stdout.readline()
        if not answer:
            raise EngineError(f"the llamacpp peer's process ended (exit code {worker.wait()})")
        reply = json.loads(answer)
        new = reply["tokens"]
        tokens = _strip_eos(new, eos_ids)
        return Run(-1, "", tokens, decode(tokens), reply["ms"], len(new), len(new))

    return run


def _llama_server_peer(server: LlamaServer, eos_ids: frozenset[int], decode: Decode) -> RunPeer:
    """llama-server: warm is its prompt cache holding the prompt (a request of no new tokens
    first, as llama.vim warms it); cold is `cache_prompt: false`, the whole prompt prefilled."""

    def run(prompt: list[int], max_new_tokens: int, cold: bool) -> Run:
        if not cold:
            server.post("/completion", {"prompt": prompt, "n_predict": 0, "cache_prompt": True})
        start = time.perf_counter()
        reply = server.post("/completion", {"prompt": prompt, "n_predict": max_new_tokens, "cache_prompt": not cold,
                                            "samplers": ["top_k"], "top_k": 1, "return_tokens": True})
        ms = (time.perf_counter() - start) * 1000
        tokens = _strip_eos(reply["tokens"], eos_ids)
        emitted = len(reply["tokens"]) + (reply.get("stop_type") == "eos" and len(tokens) == len(reply["tokens"]))
        timings = reply.get("timings", {})
        drafted, accepted = timings.get("draft_n"), timings.get("draft_n_accepted")
        passes = emitted - accepted if accepted is not None else None
        return Run(-1, "", tokens, decode(tokens), ms, emitted, passes, drafted, accepted)

    return run


def load_peers(modes: list[str], model: Path, draft: Path | None, dtype,
               eos_ids: frozenset[int], decode: Decode) -> list[Peer]:
    """Load each requested peer once (its load is not timed); check_peer has passed for each.
    `dtype`: the torch dtype transformers computes in."""
    hf = _hf_load(model, dtype) if any(m.startswith("hf-") for m in modes) else None
    runs: dict[str, Callable[[], RunPeer]] = {
        "hf-ar": lambda: _hf_peer(hf, eos_ids, decode),
        "hf-lookup": lambda: _hf_peer(hf, eos_ids, decode, prompt_lookup_num_tokens=HF_LOOKUP_TOKENS),
        "hf-assisted": lambda: _hf_peer(hf, eos_ids, decode, assistant_model=_hf_load(draft, dtype)),
        "llamacpp": lambda: _llamacpp_peer(model, eos_ids, decode),
        "llama-server": lambda: _llama_server_peer(_serve(LlamaServer(model, _threads())), eos_ids, decode),
        "llama-server-spec": lambda: _llama_server_peer(_serve(LlamaServer(model, _threads(), draft)), eos_ids, decode)}
    return [Peer(mode, runs[mode]()) for mode in modes]


def _serve(server: LlamaServer) -> LlamaServer:
    atexit.register(server.close)
    return server
