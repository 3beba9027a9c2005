"""4-bit weights: a GGUF's Q4_0, Q4_1 and Q4_K blocks are read as the file holds them, checked
against gguf-py's own dequantizer (an independent implementation of ggml's layouts); the
int4 model keeps the quality of the others; converted weights survive the cache."""
import numpy as np
import pytest
import torch

from engine.engine import Engine
from engine.loading.formats.gguf_header import TensorInfo
from engine.loading.formats.gguf_int4 import Q4_0, Q4_1, Q4_K, read_int4
from engine.execution.kernels import Int4Weight, linear
from tests.code_samples import stdlib_text
from tests.test_model_sanity import bits_per_byte

gguf = pytest.importorskip("gguf")
from gguf.quants import dequantize  # noqa: E402
from tests.models import SMALL

# type -> (weights per block, bytes per block, bytes of fp16 header)
LAYOUTS = {Q4_0: (32, 18, 2), Q4_1: (32, 20, 4), Q4_K: (256, 144, 4)}
ROWS, COLS = 32, 512


def _blocks(qtype: int, header: np.ndarray) -> np.ndarray:
    """Random levels under the given fp16 header bytes (for Q4_K, the 6-bit sub-block scales
    and mins are random too, unless the header says otherwise)."""
    per_block, size, head = LAYOUTS[qtype]
    rng = np.random.default_rng(qtype)
    raw = rng.integers(0, 256, (ROWS, COLS // per_block, size), dtype=np.uint8)
    raw[..., :head] = header
    return raw.reshape(ROWS, -1)


def _read(raw: np.ndarray, qtype: int, tmp_path) -> Int4Weight:
    path = tmp_path / "tensor.bin"
    raw.tofile(path)
    return read_int4(path, TensorInfo("t", (ROWS, COLS), qtype, 0, raw.nbytes))


def _fp16_bytes(*values: float) -> np.ndarray:
    return np.array(values, dtype=np.float16).view(np.uint8)


@pytest.mark.parametrize("qtype", list(LAYOUTS))
def test_levels_are_read_exactly_as_ggml_lays_them_out(qtype, tmp_path):
    """With unit scales and no offset, gguf-py's dequantized values are the levels
    themselves (minus 8 for Q4_0), so every weight must come out bit for bit."""
    header = {Q4_0: _fp16_bytes(1.0), Q4_1: _fp16_bytes(1.0, 0.0), Q4_K: _fp16_bytes(1.0, 0.0)}[qtype]
    raw = _blocks(qtype, header)
    if qtype == Q4_K:  # every sub-block scale 1 and min 0 (6-bit fields, see gguf_int4.py)
        scales = raw.reshape(ROWS, -1, 144)[..., 4:16]
        scales[..., 0:4], scales[..., 4:8], scales[..., 8:12] = 1, 0, 1
    want = torch.from_numpy(dequantize(raw, gguf.GGMLQuantizationType(qtype)).reshape(ROWS, COLS))
    assert torch.equal(_read(raw, qtype, tmp_path).dequantize(torch.float32), want)


@pytest.mark.parametrize("qtype", list(LAYOUTS))
def test_scales_and_offsets_match_gguf_py_up_to_bf16(qtype, tmp_path):
    """Real-looking scales: the only difference allowed is the bf16 rounding of each group's
    scale and zero (relative 2^-9 each), which torch's int4 kernel requires."""
    rng = np.random.default_rng(1)
    n_blocks = ROWS * COLS // LAYOUTS[qtype][0]
    header = np.concatenate([_fp16_bytes(*rng.uniform(0.001, 0.05, n_blocks)).reshape(n_blocks, 2),
                             _fp16_bytes(*rng.uniform(-0.4, 0.0, n_blocks)).reshape(n_blocks, 2)],
                            axis=1).reshape(ROWS, -1, 4)[..., :LAYOUTS[qtype][2]]
    raw = _blocks(qtype, header)
    want = torch.from_numpy(dequantize(raw, gguf.GGMLQuantizationType(qtype)).reshape(ROWS, COLS))
    got = _read(raw, qtype, tmp_path)
    bound = 2 ** -8 * want.abs().amax() * 3
    assert (got.dequantize(torch.float32) - want).abs().max() <= bound
    x = torch.randn(5, COLS).bfloat16()  # and the kernel multiplies by those weights
    _assert_product(x, got)


def _assert_product(x: torch.Tensor, w: Int4Weight) -> None:
    """bf16 in and out: the tolerance is a few bf16 steps of the largest output."""
    want = x.float() @ w.dequantize(torch.float32).t()
    torch.testing.assert_close(linear(x, w).float(), want, atol=0.01 * want.abs().max().item(), rtol=0.01)


def test_quantize_and_row_operations_agree():
    w = torch.randn(48, 64)
    q = Int4Weight.quantize(w)
    error = (q.dequantize(torch.float32) - w).abs()
    assert error.max() <= (w.amax() - w.amin()) / 15  # half a step, plus bf16 rounding
    rows = torch.tensor([5, 0, 47])
    assert torch.equal(q.select(rows).dequantize(torch.float32), q.dequantize(torch.float32)[rows])
    assert torch.equal(q.embed(rows).float(), q.dequantize(torch.bfloat16)[rows].float())
    both = Int4Weight.cat([q.prefix(16), q.select(torch.arange(16, 48))])
    assert torch.equal(both.dequantize(torch.float32), q.dequantize(torch.float32))
    x = torch.randn(3, 64).bfloat16()  # 48 rows pad to the kernel's 16-row tiles; 40 do not fit
    for part in (q, q.prefix(40)):
        _assert_product(x, part)


def test_int4_model_keeps_the_quality(fp32_engine):
    """The embedded Q4_1 file computed in its own 4 bits (its Q8_0 head in int8): measured
    1.015 bits/byte here, against 1.014 for fp32."""
    text = stdlib_text("textwrap.py")[:6000]
    int4 = Engine.load(SMALL, dtype="int4", threads=2, max_len=2048)
    assert isinstance(int4.target.layers[0].wqkv, Int4Weight)
    assert bits_per_byte(int4, text) < bits_per_byte(fp32_engine, text) + 0.01
    again = Engine.load(SMALL, dtype="int4", threads=2, max_len=2048)  # from the weight cache
    first, second = (e.target.layers[3].w_down for e in (int4, again))
    assert torch.equal(first.packed()[0], second.packed()[0]) and torch.equal(first.scale, second.scale)


def test_releasing_the_plain_layout_keeps_the_product():
    """Where nothing dequantizes an int4 matrix any more, only torch's packed layout stays."""
    w = Int4Weight.quantize(torch.randn(64, 128))
    x = torch.randn(3, 128).bfloat16()
    before, nbytes = linear(x, w), w.nbytes
    w.release_plain()
    assert w.q is None and w.nbytes == nbytes and w.shape == (64, 128)
    assert torch.equal(linear(x, w), before)
    with pytest.raises(ValueError, match="packed layout"):
        w.dequantize(torch.float32)

