"""Other engines on the same weights and tasks: Hugging Face transformers and llama.cpp.

Each peer is optional: it runs only when its library is importable. Each is a contender of
runner.py: it gets the same prompt token ids, greedy decoding, the same token limit and
end-of-text tokens as our modes, and, like them, either a prefilled prompt before the clock
starts (warm: the timings compare decoding alone) or an empty cache (cold: the prefill is
timed too).
"""
from __future__ import annotations

import importlib.util
import os
import time
from collections.abc import Callable
from pathlib import Path

from lsp_server.bench.report import Run

PEER_MODES = ("hf-ar", "hf-lookup", "hf-assisted", "llamacpp")
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
    library = _LIBRARY[mode]
    if importlib.util.find_spec(library) is None:
        raise PeerUnavailable(f"{mode} needs {library}, which is not installed: {_INSTALL[library]}")
    if mode == "hf-assisted" and (draft is None or not draft.exists()):
        raise PeerUnavailable("hf-assisted needs an assistant model that transformers can load: "
                              "give --draft a .gguf file or a model folder")
    if mode.startswith("hf-") and model.suffix == ".gguf" and importlib.util.find_spec("accelerate") is None:
        raise PeerUnavailable(f"{mode} loads a GGUF through transformers, which then needs accelerate: "
                              "pip install accelerate")
    if mode == "llamacpp" and model.suffix != ".gguf":
        raise PeerUnavailable("llamacpp needs a .gguf model")


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


def _fastest_llama(path: Path):
    """llama.cpp with the thread count that decodes fastest here (one, or every core this
    process may use), timed at load: on a small CPU with OMP_WAIT_POLICY=PASSIVE (which the Makefile
    sets for torch) two threads took 34 ms per token and one 14 ms, so a fixed choice would
    handicap the peer. Each count gets its best of 3 rounds of 8 tokens after a 64-token
    prompt: one round on a noisy machine once picked the slower count (6-7 tokens/s against
    12, measured side by side)."""
    from llama_cpp import Llama

    best = None
    for threads in sorted({1, len(os.sched_getaffinity(0))}):
        llm = Llama(model_path=str(path), n_ctx=4096, n_threads=threads, verbose=False)
        llm.eval([llm.token_bos()] * 64)
        rounds = []
        for _ in range(3):
            start = time.perf_counter()
            for _ in range(8):
                llm.eval([llm.token_bos()])
            rounds.append(time.perf_counter() - start)
        llm.reset()
        if best is None or min(rounds) < best[0]:
            best = (min(rounds), llm)
    return best[1]


def _llamacpp_peer(path: Path, eos_ids: frozenset[int], decode: Decode) -> RunPeer:
    llm = _fastest_llama(path)

    def run(prompt: list[int], max_new_tokens: int, cold: bool) -> Run:
        llm.reset()
        if not cold:
            llm.eval(prompt[:-1])  # the untimed prefill; generate() reuses it as a common prefix
        new: list[int] = []
        start = time.perf_counter()
        for token in llm.generate(prompt, top_k=1, temp=0.0):
            new.append(token)
            if token in eos_ids or len(new) == max_new_tokens:
                break
        ms = (time.perf_counter() - start) * 1000
        tokens = _strip_eos(new, eos_ids)
        return Run(-1, "", tokens, decode(tokens), ms, len(new), len(new))

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
        "llamacpp": lambda: _llamacpp_peer(model, eos_ids, decode)}
    return [Peer(mode, runs[mode]()) for mode in modes]
