"""Every option of the server, once: name, type, default, choices and what it does; and how
a client's settings (initializationOptions, workspace/didChangeConfiguration) are merged in:
bad values are reported and ignored, never fatal.

The command line's flags, the server's `Settings`, the options table in README.md and
the VS Code extension's `package.json` contribution are made from (or tested against) this
table. A client sends only the settings its user set; the rest come from the command line
(`lsp_server --stdio --model ...`), else from the defaults here.
"""
from __future__ import annotations

import argparse
import dataclasses
import logging
from dataclasses import dataclass

from engine.api import BACKENDS, CONNECT_TIMEOUT_S, DEFAULT_MODE, DTYPES, MODES, READ_TIMEOUT_S
from engine.loading.catalog import DEFAULT, KNOWN

log = logging.getLogger(__name__)

MULTILINE = ("auto", "always", "never")


@dataclass(frozen=True)
class Settings:
    """The server's settings, each with its default: what every client setting of OPTIONS below
    describes (a test keeps the two in step)."""
    model: str = DEFAULT
    draft: str | None = None
    dtype: str | None = None
    endpoint: str | None = None
    tokenizer: str | None = None
    apiKeyEnv: str | None = None
    allowInsecure: bool = False
    connectTimeoutS: float = CONNECT_TIMEOUT_S
    readTimeoutS: float = READ_TIMEOUT_S
    backend: str = "auto"
    mode: str = DEFAULT_MODE
    maxTokens: int = 64
    multiline: str = "auto"
    timeBudgetMs: float = 2500
    coldPrefillMs: float = 1000
    windowTokens: int | None = None
    debounceMs: float = 0
    repoContext: bool = True
    nextEdit: bool = True
    editModel: str | None = None
    enabled: bool = True

    def model_key(self) -> tuple:
        """The settings whose change loads another model (Option.reloads)."""
        return tuple(getattr(self, k) for k in MODEL_KEYS)


@dataclass(frozen=True)
class Option:
    name: str  # as clients send it (camelCase); the flag is --kebab-case
    kind: type  # str, int, float or bool
    default: object
    doc: str
    choices: tuple | None = None  # allowed values (None among them: "unset")
    minimum: float | None = None
    maximum: float | None = None
    nullable: bool = False  # None is allowed
    flag: bool = False  # also a command-line flag of every command that loads a model
    setting: bool = True  # also a client setting (False: command line only)
    reloads: bool = False  # changing it loads another model

    @property
    def cli_flag(self) -> str:
        return "--" + "".join(f"-{c.lower()}" if c.isupper() else c for c in self.name)

    def problem(self, value: object) -> str | None:
        """Why `value` is not acceptable, or None when it is."""
        if value is None:
            return None if self.nullable else "must not be null"
        if self.choices is not None:
            return None if value in self.choices else f"choose from {[c for c in self.choices if c is not None]}"
        if self.kind is bool:
            return None if isinstance(value, bool) else "true or false"
        numeric = (int,) if self.kind is int else (int, float)
        if self.kind is not str and (isinstance(value, bool) or not isinstance(value, numeric)):
            return f"a number ({self.kind.__name__})"
        if self.kind is str:
            return None if isinstance(value, str) and value else "a non-empty string"
        if (self.minimum is not None and value < self.minimum) or (
                self.maximum is not None and value > self.maximum):
            return f"between {self.minimum} and {self.maximum}" if self.maximum is not None else f">= {self.minimum}"
        return None


OPTIONS: tuple[Option, ...] = (
    # The target model: a known name (engine/loading/catalog.py; fetched once into the user cache),
    # a .gguf file, a Hugging Face folder (config.json + *.safetensors) or hf:OWNER/REPO/FILE.gguf.
    Option("model", str, Settings.model, f"target model: {', '.join(KNOWN)}, a .gguf file, a Hugging Face folder "
           "or hf:OWNER/REPO/FILE.gguf", flag=True, reloads=True),
    # A draft model sharing the target's tokenizer: a known name, a path or hf:..., or
    # "embedded" (the shipped one-layer draft on smollm2-135m's features); null for none.
    Option("draft", str, Settings.draft, "draft model sharing the target's tokenizer: a name, a path, or embedded "
           "(the one-layer draft of smollm2-135m)",
           nullable=True, flag=True, reloads=True),
    # Weights format; null picks the fastest measured for the device: on a CPU gguf (a GGUF
    # file's own blocks where it is mapped, engine/execution/native/) where the native decoder runs the
    # file, else int4 for a GGUF stored in 4 bits, else int8; bf16 or fp16 on a GPU. fp32 is
    # the exact mode the tests use.
    Option("dtype", str, Settings.dtype, "weights: gguf, int4, int8, bf16, fp16, fp32 (null: on a CPU gguf where the "
           "native decoder runs the file, else int4 for a 4-bit GGUF, else int8; bf16/fp16 on a GPU)",
           choices=(None, *sorted(DTYPES)), nullable=True, flag=True, reloads=True),
    # A shared server speaking OpenAI's /v1/completions (vLLM, SGLang, llama-server, Ollama,
    # LM Studio, TGI), e.g. http://gpu-box:8000/v1. Set, the model runs there and `model` is the
    # served model's name (left at its default: the one model the server serves); null: run locally.
    Option("endpoint", str, Settings.endpoint,
           "OpenAI-compatible server URL; null: run the model locally (docs/remote.md)",
           nullable=True, flag=True, reloads=True),
    # The served model's tokenizer (.gguf or Hugging Face folder) for its FIM prompt; null: ask
    # the server's /tokenize, else send the plain prefix.
    Option("tokenizer", str, Settings.tokenizer,
           "with endpoint: the served model's tokenizer (.gguf or folder) for FIM prompts",
           nullable=True, flag=True, reloads=True),
    # The NAME of the environment variable holding the server's API key (never the key).
    Option("apiKeyEnv", str, Settings.apiKeyEnv, "with endpoint: name of the environment variable holding the API key",
           nullable=True, flag=True, reloads=True),
    # Without it, an API key is never sent over plain http to a host other than this machine.
    Option("allowInsecure", bool, Settings.allowInsecure, "with endpoint: allow sending the API key over plain http",
           flag=True, reloads=True),
    # Seconds to connect to the endpoint, and to wait for each piece of its answer.
    Option("connectTimeoutS", float, Settings.connectTimeoutS, "with endpoint: seconds to connect", minimum=0.1,
           flag=True, reloads=True),
    Option("readTimeoutS", float, Settings.readTimeoutS, "with endpoint: seconds to wait for each part of an answer",
           minimum=0.1, flag=True, reloads=True),
    # Where the target runs: torch (CPU or CUDA) or ExLlamaV2 (NVIDIA GPUs); auto picks.
    Option("backend", str, Settings.backend,
           "model backend: auto, torch or exllamav2", choices=BACKENDS, flag=True, reloads=True),
    # torch threads; null: every core this process may use. Command line only.
    Option("threads", int, None, "torch threads (null: all cores)", minimum=1, nullable=True,
           flag=True, setting=False),
    # Decoding: ar (plain), lookup (prompt lookup drafts), draft (draft model), hybrid (both).
    # lookup was fastest in the benchmark with the default weights.
    Option("mode", str, Settings.mode, "decoding mode: ar, lookup, draft or hybrid", choices=MODES),
    # Most new tokens per suggestion.
    Option("maxTokens", int, Settings.maxTokens, "most new tokens per suggestion", minimum=1, maximum=1024),
    # auto: several lines only at the end of a line that opens a block (":" or "{").
    Option("multiline", str, Settings.multiline, "multi-line suggestions: auto, always or never", choices=MULTILINE),
    # How long a request waits once its prompt is prefilled. Editors do not ask again when the
    # user pauses, so a request must wait for the line a real model writes in that time (a
    # newer keystroke cancels it anyway); a suggestion not whole by then is not shown but
    # finishes in the background for the next request there. 0: no limit.
    Option("timeBudgetMs", float, Settings.timeBudgetMs,
           "ms a request waits for its suggestion after the prefill (0: no limit)",
           minimum=0),
    # The most the first request at a new spot may spend prefilling: past that it gets a window
    # this prefills in time (lsp_server/completion/cold_window.py), and the full one is prefilled in the
    # background for the requests after it. 0: always the full window, however long it takes
    # (as llama.vim waits for llama-server's).
    Option("coldPrefillMs", float, Settings.coldPrefillMs,
           "ms a request at a new spot may spend prefilling before it gets a shorter window "
           "(0: always the full window)", minimum=0),
    # Tokens of the file above the cursor in a prompt: more inform the line better and take
    # longer to prefill (with the full window always cached, 2,560 got llama.vim's exactness on
    # the pause replay where 1,024 got three quarters of it: docs/server.md). null: sized to the
    # machine (lsp_server/completion/suggester.py's auto_window).
    Option("windowTokens", int, Settings.windowTokens,
           "tokens of the file before the cursor in a prompt, at most what the model's context leaves "
           "(more: righter, slower to prefill); null: what this machine prefills in 4 s, 1,024 to 2,560",
           minimum=64, maximum=16384, nullable=True),
    # Wait before starting a generation; a newer keystroke cancels the wait.
    Option("debounceMs", float, Settings.debounceMs,
           "ms to wait before generating; a newer keystroke cancels it", minimum=0),
    # Put the repository's context in the prompt (lsp_server/completion/repo_context.py): definitions of
    # the names near the cursor and of those the file imports, recent edits, similar chunks.
    # false: only chunks of the open documents similar to the cursor's surroundings.
    Option("repoContext", bool, Settings.repoContext,
           "repository context in the prompt: definitions of the names used near "
           "the cursor, recent edits, similar code (docs/context.md)"),
    # Next-edit suggestions (lsp_server/next_edit/rewrite.py): after a pause following an edit, the
    # matching change the user will make nearby, asked for with draftline/nextEdit.
    Option("nextEdit", bool, Settings.nextEdit, "next-edit suggestions: the same kind of change as the recent edits, where it is due"),
    # The model that predicts next edits (any Qwen-family chat model: a name, a .gguf, a folder
    # or hf:...); null: the loaded model.
    Option("editModel", str, Settings.editModel, "model for next-edit suggestions (a name, a path or hf:...); null: the loaded model",
           nullable=True),
    # Offer completions at all (also toggled by the draftline.toggle command).
    Option("enabled", bool, Settings.enabled, "offer completions"),
)
BY_NAME = {o.name: o for o in OPTIONS}
SETTINGS = tuple(o for o in OPTIONS if o.setting)
MODEL_KEYS = tuple(o.name for o in OPTIONS if o.reloads)


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of every command that loads a model. Their default is "not given", so that a
    flag placed before the sub-command (`lsp_server --model X complete ...`) is not overridden
    by the sub-command's own; `model_settings` fills in the table's defaults."""
    for o in OPTIONS:
        if o.flag and o.kind is bool:
            parser.add_argument(o.cli_flag, dest=o.name, default=argparse.SUPPRESS,
                                action="store_const", const=True, help=o.doc)
        elif o.flag:
            parser.add_argument(o.cli_flag, dest=o.name, default=argparse.SUPPRESS,
                                type=None if o.kind is str else o.kind,
                                choices=[c for c in o.choices if c is not None] if o.choices else None,
                                help=f"{o.doc} (default: {o.default})")


def add_mode_argument(parser: argparse.ArgumentParser) -> None:
    o = BY_NAME["mode"]
    parser.add_argument(o.cli_flag, dest=o.name, choices=o.choices, default=o.default, help=o.doc)


def model_settings(args: argparse.Namespace) -> dict:
    """The model flags given on the command line, each else its default."""
    return {o.name: getattr(args, o.name, o.default) for o in OPTIONS if o.flag}


def model_flags(args: argparse.Namespace) -> list[str]:
    """The command-line flags that give another command these model settings."""
    flags: list[str] = []
    for o in OPTIONS:
        value = getattr(args, o.name, o.default)
        if o.flag and value != o.default:
            flags += [o.cli_flag] if o.kind is bool else [o.cli_flag, str(value)]
    return flags


def docs_table() -> str:
    """The README's options table (a test keeps the two equal): every option, as a client
    setting and as a command-line flag."""
    rows = ["| setting | flag | default | meaning |", "|---|---|---|---|"]
    for o in OPTIONS:
        default = "null" if o.default is None else str(o.default).lower() if o.kind is bool else repr(o.default).replace("'", '"')
        setting = o.name if o.setting else "-"
        flag = f"`{o.cli_flag}`" if o.flag else "-"
        rows.append(f"| {setting} | {flag} | {default} | {o.doc} |")
    return "\n".join(rows)


def merge(base: Settings, options: object) -> tuple[Settings, list[str]]:
    """`base` updated from a client's options dict; unknown keys and bad values are skipped
    and described in the returned list of problems."""
    if options is None:
        return base, []
    if not isinstance(options, dict):
        return base, [f"settings must be an object, got {type(options).__name__}"]
    if isinstance(options.get("draftline"), dict):  # VS Code style: {"draftline": {...}}
        options = options["draftline"]
    names = {o.name for o in SETTINGS}
    changes, problems = {}, []
    for name, value in options.items():
        if name not in names:
            problems.append(f"unknown setting {name!r}")
        elif (why := BY_NAME[name].problem(value)) is not None:
            problems.append(f"setting {name}={value!r} ignored: {why}")
        else:
            changes[name] = value
    for p in problems:
        log.warning("%s", p)
    return dataclasses.replace(base, **changes), problems
