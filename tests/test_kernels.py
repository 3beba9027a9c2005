"""The int8 kernels' arithmetic, checked against float32 on the same weights."""
import torch

from engine.execution.kernels import Int8Weight, int8_product, linear


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


def test_a_bf16_product_takes_the_float32_bias_a_model_keeps():
    """Biases stay float32 (Qwen2's q/k/v) while a bf16 model's matrices and activations are
    bf16: the product adds the bias in the activations' dtype, as a float32 model would."""
    g = torch.Generator().manual_seed(0)
    x, w, bias = torch.randn(3, 16, generator=g), torch.randn(8, 16, generator=g), torch.randn(8, generator=g)
    got = linear(x.bfloat16(), w.bfloat16(), bias)
    assert got.dtype == torch.bfloat16
    assert torch.allclose(got.float(), x @ w.T + bias, atol=0.1, rtol=0.05)
