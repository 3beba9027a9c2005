"""Command-line options shared by every subcommand that loads a model."""
from __future__ import annotations

import argparse

from engine.engine import MODES
from engine.models import BACKENDS, DTYPES, EMBEDDED


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default=EMBEDDED,
                        help="target model: 'embedded', a .gguf file or a Hugging Face folder")
    parser.add_argument("--draft", default=None,
                        help="draft model sharing the target's tokenizer ('embedded' or a path)")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default=None,
                        help="weights dtype (default: int8 on a CPU, bf16 or fp16 on a GPU)")
    parser.add_argument("--backend", choices=BACKENDS, default="auto")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: all cores)")


def add_mode_argument(parser: argparse.ArgumentParser, default: str = "lookup") -> None:
    parser.add_argument("--mode", choices=MODES, default=default, help="decoding mode")
