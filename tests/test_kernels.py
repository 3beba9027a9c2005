"""The int8 kernels' arithmetic, checked against float32 on the same weights."""
import torch

from engine.execution.kernels import Int8Weight, int8_product


def test_the_int8_head_product_keeps_bf16_precision_and_each_row_alone():
    """int8_product (the output head) against float32 on the same int8 weights: its split of
    the input into two int8 parts keeps ~14 bits; and a row's logits do not depend on which
    other rows share the pass, so speculative passes score tokens as one-token passes do."""
    w = Int8Weight.quantize(torch.randn(1000, 64))
    x = torch.randn(13, 64) * torch.logspace(-2, 1, 64)  # uneven magnitudes, as activations are
    want = x @ w.dequantize(torch.float32).t()
    got = int8_product(x, w)
    assert (got - want).abs().max() < 1e-3 * want.abs().max()
    one_by_one = torch.cat([int8_product(x[i:i + 1], w) for i in range(13)])
    assert torch.equal(one_by_one, got)
