"""`RemoteEngine`: the engine's surface (engine/api.py) over an OpenAI-compatible server.

The editor-side work stays local and unchanged: context windows, snippets, the FIM template,
typed-through reuse, cancel-previous, stop rules and clean-up. Only the model runs elsewhere.

Prompts. With the served model's tokenizer (`tokenizer`, a .gguf or Hugging Face folder of the
same model) the prompt is built exactly as the local engine builds it (context.build_prompt) and
sent as its text, FIM tokens written as their names (servers parse special tokens in a
completion's prompt). Without one, `TextPieces` stands in: windows are budgeted at about four
characters per token, and the FIM tokens are those the server's own tokenizer confirms
(`/tokenize`: llama.cpp, vLLM, SGLang; `/extras/tokenize`: llama-cpp-python), else the prompt is
the plain prefix, as for a model without FIM tokens.

Cancellation. A request whose cancel flag is set (a newer keystroke) closes its stream at once,
and so do the stop rules (single line, block end): the server sees the connection drop and stops
generating (vLLM aborts the request, llama.cpp's server and llama-cpp-python stop at the next
token).
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from engine.remote.client import Cancelled, Endpoint, RemoteError, get_json, stream_completion
from engine.api import CONNECT_TIMEOUT_S, DEFAULT_MODE, READ_TIMEOUT_S, Completion, Request
from engine.loading.catalog import DEFAULT
from engine.stats import Stats
from engine.tokenization.special_names import BY_KEY
from engine.tokenization.tokenizer import FimTokens, Tokenizer

DEFAULT_MAX_LEN = 4096  # when the server does not say its context length
# The `model` setting's default (the local default model): take the one model the server serves.
ANY_MODEL = DEFAULT
# Paths where servers tokenize text, with the body each expects (the served model's name is
# added where asked) and the answer's key.
TOKENIZE = (("/tokenize", "content"), ("/tokenize", "prompt"), ("/extras/tokenize", "input"))


@dataclass(frozen=True)
class FimTexts:
    """The FIM tokens as text, e.g. <|fim_prefix|>, <|fim_suffix|>, <|fim_middle|>."""
    prefix: str
    suffix: str
    middle: str


class TextPieces:
    """Stands in for the served model's tokenizer when it is not given: `encode` cuts text into
    pieces of about a token's length (code averages 3-4 characters per token), so the context
    windows have a size the server's context holds, and the prompt list stays text. Its FIM
    "ids" are the FIM tokens' texts, so context.build_prompt's FIM template works unchanged."""

    CHARS = 4
    add_bos = False
    bos_id = None
    repo = None  # files go in as comments: the served model's special tokens are not known here

    def __init__(self, fim: FimTexts | None = None):
        self.fim = FimTokens(fim.prefix, fim.suffix, fim.middle) if fim else None
        self.eos_ids: set[int] = set()

    def encode(self, text: str) -> list[str]:
        return [text[i:i + self.CHARS] for i in range(0, len(text), self.CHARS)]

    def with_bos(self, pieces: list) -> list:
        return pieces

    def decode(self, pieces: Sequence[str]) -> str:
        return "".join(pieces)


@dataclass
class Served:
    """What the server told us about itself (asked once, again after a failure)."""
    model: str | None  # the name to send (None: the server did not list models)
    max_len: int = DEFAULT_MAX_LEN
    fim: FimTexts | None = None


@dataclass
class RemoteEngine:
    endpoint: Endpoint
    model: str = ANY_MODEL  # the served model's name; ANY_MODEL: the one it serves
    local_tokenizer: Tokenizer | None = None  # the served model's tokenizer, if given
    served: Served | None = None  # None until the server has answered /v1/models
    problem: str | None = None  # why the last contact failed (None: fine)
    _documents: set[str] = field(default_factory=set)
    _pieces: TextPieces = field(default_factory=TextPieces)

    modes = ("ar",)  # the server decodes (its own speculative settings apply)

    @classmethod
    def load(cls, endpoint: str, model: str = ANY_MODEL, tokenizer: str | None = None,
             api_key_env: str | None = None, allow_insecure: bool = False,
             connect_timeout_s: float = CONNECT_TIMEOUT_S, read_timeout_s: float = READ_TIMEOUT_S) -> RemoteEngine:
        """Check the settings (errors here are final until they change) and try the server once;
        an unreachable server is not a load error: `problem` says why, and every request tries
        again, so the editor recovers when the server comes back."""
        ep = Endpoint.parse(endpoint, api_key_env, allow_insecure, connect_timeout_s, read_timeout_s)
        local = None
        if tokenizer:
            from engine.tokenization import load_tokenizer

            local = load_tokenizer(tokenizer)
        engine = cls(ep, model or ANY_MODEL, local)
        try:
            engine.connect()
        except RemoteError as exc:
            engine.problem = str(exc)  # the caller says it (the server's status, the CLI's error)
        return engine

    # --- the engine surface ---------------------------------------------------------------
    @property
    def tokenizer(self) -> Tokenizer | TextPieces:
        return self.local_tokenizer or self._pieces

    @property
    def max_len(self) -> int:
        return self.served.max_len if self.served else DEFAULT_MAX_LEN

    @property
    def completion_caches(self) -> int:
        return 1  # the server's own, out of sight

    @property
    def documents(self) -> int:
        return len(self._documents)

    def set_document(self, doc_id: str, text: str, source: str = "document") -> None:
        self._documents.add(doc_id)  # no lookup here: the server decodes

    def remove_document(self, doc_id: str) -> None:
        self._documents.discard(doc_id)

    def remember(self, text: str, before: str = "") -> None:
        pass  # the server drafts (or not) on its own

    def describe(self) -> dict:
        return {"kind": "remote", "dtype": "remote", "backend": "remote", "endpoint": self.endpoint.base,
                "served_model": self.served.model if self.served else None}

    def prefill_seconds(self, prompt: object) -> float:
        return 0.0  # the server prefills (and keeps its own prefix cache)

    def prefill_tokens_per_s(self) -> float:
        return float("inf")  # not known here: the server's business

    def cached_tokens(self, prompt: object) -> int:
        return 0  # the server's own prefix cache is not known here

    def prefill(self, tokens: Sequence[int], cancel=None) -> None:
        pass

    def prompt_tokens(self, prompt):
        return prompt

    # --- talking to the server --------------------------------------------------------------
    def connect(self, cancel=None) -> Served:
        """Ask the server which models it serves (and check ours is one), and which FIM tokens
        its tokenizer has when we have no tokenizer of our own."""
        if self.served is not None:
            return self.served
        try:
            listing = get_json(self.endpoint, self.endpoint.base + "/models", cancel=cancel)
        except RemoteError as exc:
            if " 404 " not in str(exc):
                raise
            listing = None  # a server without /v1/models: send the name as given
        served = Served(None if self.model == ANY_MODEL else self.model)
        if listing is not None:
            entries = listing.get("data") if isinstance(listing, dict) else None
            if not isinstance(entries, list):
                raise RemoteError(f"{self.endpoint.base}/models: malformed model list: {str(listing)[:120]}")
            names = [e.get("id") for e in entries if isinstance(e, dict)]
            if self.model == ANY_MODEL:
                if len(names) != 1:
                    raise RemoteError(f"{self.endpoint.base} serves {len(names)} models "
                                      f"({', '.join(map(str, names)) or 'none'}): name one with model / --model")
                served.model = names[0]
            elif self.model not in names:
                raise RemoteError(f"model {self.model!r} is not served at {self.endpoint.base} "
                                  f"(it serves: {', '.join(map(str, names)) or 'nothing'})")
            entry = entries[names.index(served.model)]
            if isinstance(entry.get("max_model_len"), int):  # vLLM, SGLang
                served.max_len = entry["max_model_len"]
        if self.local_tokenizer is None:
            served.fim = self._server_fim(served.model, cancel)
            self._pieces = TextPieces(served.fim)
        self.served, self.problem = served, None
        return served

    def _server_fim(self, model: str | None, cancel) -> FimTexts | None:
        """The FIM token names the server's tokenizer reads as one token each, if any."""
        def count(text: str) -> int | None:
            for path, key in TOKENIZE:
                body = {key: text} | ({"model": model} if key == "prompt" and model else {})
                try:
                    answer = get_json(self.endpoint, self.endpoint.root + path, body, cancel)
                except RemoteError:
                    continue
                tokens = answer.get("tokens") if isinstance(answer, dict) else None
                if isinstance(tokens, list):
                    return len(tokens)
            return None

        found = []
        for key in ("fim_pre", "fim_suf", "fim_mid"):
            for name in BY_KEY[key]:
                n = count(name)
                if n is None:
                    return None  # no tokenize endpoint: plain prompts
                if n == 1:
                    found.append(name)
                    break
            else:
                return None
        return FimTexts(*found)

    def prompt_text(self, prompt: str | Sequence) -> str:
        """The text sent for a prompt built by context.build_prompt: a string as it is; token
        ids with the FIM and repository tokens written as their names and no BOS (the server
        adds its own)."""
        if isinstance(prompt, str):
            return prompt
        if self.local_tokenizer is None:
            return "".join(prompt)
        tok = self.local_tokenizer
        ids = list(prompt)
        if tok.add_bos and ids and ids[0] == tok.bos_id:
            ids = ids[1:]
        special = {i for tokens in (tok.fim, tok.repo) if tokens for i in tokens.__dict__.values()}
        out, run = [], []
        for i in ids:
            if i in special:
                out += [tok.decode(run), tok.id_to_token(i)]
                run = []
            else:
                run.append(i)
        return "".join(out) + tok.decode(run)

    def complete(self, prompt: str | Sequence, request: Request = Request(),
                 mode: str = DEFAULT_MODE) -> Completion:
        """Stream the server's continuation of `prompt`, cut by `request.stop` and closed the
        moment `request.cancel` is set. `mode` is the server's business (its own decoding)."""
        started = time.perf_counter()
        stats = Stats()
        cancel = request.cancel
        try:
            served = self.connect(cancel)
        except Cancelled:
            return Completion("", [], Stats(stop_reason="cancelled"))
        except RemoteError as exc:
            self.problem = str(exc)
            raise
        s = request.sampling
        body = {"prompt": self.prompt_text(prompt), "max_tokens": request.max_new_tokens,
                "temperature": s.temperature, "top_p": s.top_p}
        if served.model is not None:
            body["model"] = served.model
        if s.top_k:
            body["top_k"] = s.top_k  # not OpenAI's, but vLLM, llama.cpp and SGLang take it
        if s.seed is not None:
            body["seed"] = s.seed
        text, chunks, usage, reason = "", 0, None, "max_tokens"
        # Servers send one event per token or fewer; many more means it does not stop.
        stream = stream_completion(self.endpoint, body, cancel, max_events=2 * request.max_new_tokens + 16)
        try:
            for chunk in stream:
                if chunks == 0 and not stats.prefill_ms:
                    stats.prefill_ms = (time.perf_counter() - started) * 1000
                    if request.on_prefilled is not None:
                        request.on_prefilled()
                chunks += bool(chunk.text)
                usage = chunk.completion_tokens or usage
                text += chunk.text
                if request.stop is not None and (cut := request.stop(text)) is not None:
                    text, reason = text[:cut], "stop"
                    break
                if chunk.finish_reason:
                    # OpenAI's names: "stop" (end of text or a stop string), "length"
                    reason = "eos" if chunk.finish_reason == "stop" else "max_tokens"
                if cancel is not None and cancel.is_set():
                    reason = "cancelled"
                    break
        except Cancelled:
            reason = "cancelled"
        except RemoteError as exc:
            self.problem, self.served = str(exc), None  # ask again: it may come back changed
            raise
        finally:
            stream.close()  # closes the connection: the server stops
        if cancel is not None and cancel.is_set():
            reason = "cancelled"
        elif self.problem is not None:
            self.problem = None
        stats.new_tokens = usage or chunks
        stats.target_passes = stats.new_tokens
        stats.total_ms = (time.perf_counter() - started) * 1000
        stats.stop_reason = reason
        return Completion(text, [], stats)
