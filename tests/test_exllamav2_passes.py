"""The exllamav2 backend's passes, on a stand-in for ExLlamaV2's model object (exllamav2 itself
runs only on CUDA: scripts/gpu_check.sh checks it there): which of its entry points a pass takes,
the logits it leaves for verification, and the cache length it keeps in step."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch

from engine.execution.backends.exllamav2 import ExLlamaV2Backend

VOCAB, PADDED = 10, 16  # the real vocabulary, and the head's rows (padding set to -65504)


class StandInModel:
    """ExLlamaV2's forward/forward_chunk contract: fp16 logits [1, n, padded vocabulary], the
    cache advanced by n; `forward` splits what its buffers cannot take at once."""

    def __init__(self):
        self.config = SimpleNamespace(max_input_len=8, max_attention_size=64)
        self.calls: list[tuple[str, int]] = []

    def forward_chunk(self, ids, cache, preprocess_only=False):
        self.calls.append(("forward_chunk", ids.shape[1]))
        return self._logits(ids, cache, preprocess_only)

    def forward(self, ids, cache, preprocess_only=False):
        self.calls.append(("forward", ids.shape[1]))
        return self._logits(ids, cache, preprocess_only).get("logits")

    @staticmethod
    def _logits(ids, cache, preprocess_only: bool) -> dict:
        cache.current_seq_len += ids.shape[1]
        if preprocess_only:
            return {}
        g = torch.Generator().manual_seed(int(ids.sum()))
        out = torch.randn(1, ids.shape[1], PADDED, generator=g).half()
        out[:, :, VOCAB:] = -65504.0
        return {"logits": out}


def backend() -> ExLlamaV2Backend:
    return ExLlamaV2Backend(StandInModel(), SimpleNamespace(current_seq_len=0), VOCAB, max_len=64)


def test_a_pass_its_buffers_take_at_once_skips_the_chunking_loop():
    b = backend()
    b.forward(list(range(8)), logits=False)  # 8 tokens, 8 x 8 attention scores: one chunk
    b.forward([1, 2, 3])  # (8 + 3) x 3 scores
    b.forward([1] * 6, logits=False)  # (11 + 6) x 6 = 102 scores: more than the buffers take
    assert b.model.calls == [("forward_chunk", 8), ("forward_chunk", 3), ("forward", 6)]
    assert b.cache.current_seq_len == b.length == 17
    b.truncate(5)
    assert b.cache.current_seq_len == b.length == 5


def test_verification_reads_fp16_rows_of_the_real_vocabulary_and_forward_gives_float32():
    b = backend()
    rows = b.score([4, 5, 6]).rows
    assert rows.dtype == torch.float16 and rows.shape == (3, VOCAB)
    b.truncate(0)
    host = b.forward([4, 5, 6])
    assert host.dtype == np.float32 and host.shape == (3, VOCAB)
    np.testing.assert_array_equal(host, rows.float().numpy())
    ids = b.score([7]).argmax()  # where the pass left its rows
    b.truncate(3)
    assert ids == [int(b.forward([7])[0].argmax())]
