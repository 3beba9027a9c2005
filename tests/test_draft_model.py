"""The shipped draft: loads on the target's features and embedding, agrees with it, keeps output exact."""
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from engine.draft_length import PassCosts
from engine.engine import Engine
from engine.api import Request
from engine.draft_loading import EMBEDDED_DRAFT_DIR, load_embedded_draft
from engine.errors import ModelLoadError
from engine.loading.fetch import model_path
from engine.api import Sampling
from engine.training.data import is_held_out, stdlib_files, stdlib_root
from engine.training.feature_net import FeatureDraftNet
from engine.training.measure import agreement
from engine.loading.formats.load import load_weights
from tests.models import SMALL

# Measured on this file: 49.3% (fp32, first 384 tokens); 43.0% over 12 held-out files in bf16
# (docs/draft_model.md). The floor leaves room for platform differences.
AGREEMENT_FLOOR = 0.40
DRAFTING_PAYS = PassCosts([0.0] + [1.0] * 30, draft_cost=0.01)  # seconds: verifying is flat, drafting cheap


@pytest.fixture(scope="module")
def engine(fp32_engine: Engine) -> Iterator[Engine]:
    """The shared fp32 target (conftest.py), which loads the embedded draft. Its pass costs are
    set so that drafting pays: timed on a loaded machine, a draft pass can cost as much as a
    target pass, and the draft-length policy then rightly drafts nothing."""
    assert fp32_engine.draft is not None
    measured = fp32_engine.costs
    fp32_engine.costs = DRAFTING_PAYS
    yield fp32_engine
    fp32_engine.costs = measured


def test_engine_load_embedded_draft_shares_the_target_embedding(engine: Engine) -> None:
    net = engine.draft.backend
    assert net.embed is engine.target.embed
    assert len(net.layers) == 1
    assert "draft" in engine.modes


def test_shipped_file_is_small_and_holds_no_embedding() -> None:
    path = EMBEDDED_DRAFT_DIR / "model.safetensors"
    assert path.stat().st_size < 25_000_000
    with safe_open(str(path), "pt") as f:
        names = set(f.keys())
    assert "embed" not in names and "lm_head" not in names
    assert {"head_rows", "fc", "fc_bias"} <= names


def held_out_file() -> Path:
    _, held = stdlib_files()
    path = next(f for f in held if f.stat().st_size > 8_000)
    assert is_held_out(path.relative_to(stdlib_root()).as_posix())
    return path


def held_out_ids(engine: Engine, tokens: int) -> list[int]:
    return engine.tokenizer.encode(held_out_file().read_text(encoding="utf-8"))[:tokens]


def test_engine_arithmetic_equals_the_training_module(engine: Engine) -> None:
    """The drafter's cached, position-by-position logits against an independent route: the
    batched training module (engine/training/feature_net.py) on the same target features."""
    ids = held_out_ids(engine, 200)
    target, draft = engine.target, engine.draft
    target.truncate(0)
    target.forward(ids[:-1], logits=False)
    draft.reset()
    last = draft.catch_up(ids)  # the cached route, as drafting runs it
    shipped = load_file(EMBEDDED_DRAFT_DIR / "model.safetensors")
    weights = load_weights(model_path(SMALL))
    net = FeatureDraftNet(weights.config, weights.tensors, 0, shipped["head_rows"])
    with torch.no_grad():
        for name, param in net.params.items():
            param.copy_(shipped[name].float())
        feats = torch.as_tensor(target.features[:len(ids) - 1]).float()[None]
        want = net.logits(net(feats, torch.tensor(ids[1:])[None]))[0]
    got = draft.teacher_forced_logits(ids)[:, shipped["head_rows"]]
    assert torch.allclose(got, want, atol=1e-3, rtol=1e-3)
    assert torch.allclose(last[shipped["head_rows"]], want[-1], atol=1e-3, rtol=1e-3)


def test_incremental_cache_equals_a_fresh_one(engine: Engine) -> None:
    """The draft's cache kept across calls (its own drafted positions dropped, the target's
    new and rewritten positions read in) gives the logits a cold start gives."""
    ids = held_out_ids(engine, 300)
    target, draft = engine.target, engine.draft

    def incremental_then_fresh(context: list[int]) -> tuple[np.ndarray, np.ndarray]:
        target.sync(context[:-1])
        incremental = draft.catch_up(context)
        draft.reset()
        return incremental, draft.catch_up(context)

    draft.reset()
    for context in (ids, ids[:100] + ids[200:]):  # the target moves on; then rewrites its past
        target.sync(context[:150])
        draft.propose(context[:151], 4, Sampling(), np.random.default_rng())  # leaves drafted positions
        incremental, fresh = incremental_then_fresh(context)
        assert np.allclose(incremental, fresh, atol=1e-4)


def test_prefill_fills_both_caches(engine: Engine) -> None:
    """Engine.prefill (the bench's untimed step) leaves the draft caught up with the target."""
    ids = held_out_ids(engine, 120)
    engine.draft.reset()
    engine.prefill(ids)
    assert engine.target.tokens == ids[:-1]
    assert engine.draft.backend.length == engine.target.length


def test_greedy_agreement_on_a_held_out_file(engine: Engine) -> None:
    assert agreement(engine, [held_out_file()], 384) >= AGREEMENT_FLOOR


@pytest.mark.parametrize("prompt", [
    "import os\n\n\ndef list_python_files(root):\n    \"\"\"Return the .py files under root.\"\"\"\n",
    "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, item):\n",
])
def test_draft_mode_output_equals_autoregressive_in_fp32(engine: Engine, prompt: str) -> None:
    request = Request(max_new_tokens=24)
    ar = engine.complete(prompt, request, "ar")
    draft = engine.complete(prompt, request, "draft")
    assert draft.tokens == ar.tokens
    assert draft.stats.accepted > 0  # the draft model really proposed tokens the target kept


def test_missing_draft_folder_is_a_clear_error(engine: Engine, tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="cannot read the embedded draft"):
        load_embedded_draft(engine.target, tmp_path)


@pytest.mark.integration  # the embedded model with its draft
def test_on_the_default_native_target_it_loads_drafts_and_stays_exact() -> None:
    """The embedded model as users run it (its own blocks, the native backend): the draft
    shares the mapped embedding, its pass cost is timed through it at load, and its drafts
    leave the output as plain decoding's."""
    native = Engine.load(SMALL, draft="embedded", threads=2)
    assert type(native.target).__name__ == "NativeLlama" and native.draft.backend.embed is native.target.embed
    assert native.costs.draft_cost > 0
    native.costs = DRAFTING_PAYS  # whatever this machine's timings
    prompt = held_out_file().read_text(encoding="utf-8")[:1200]
    ar = native.complete(prompt, Request(max_new_tokens=24), "ar").tokens
    for mode in ("draft", "hybrid"):
        got = native.complete(prompt, Request(max_new_tokens=24), mode)
        assert got.tokens == ar, mode
        assert got.stats.model_tested > 0, mode
