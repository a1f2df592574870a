"""Block-scaled FP8: round-trip error within half an ulp at each block's scale, scale rule, shapes."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mxserve.formats import (
    E4M3FN,
    E4M3FNUZ,
    E5M2,
    FloatFormat,
    assert_tensors_equal,
    assert_within,
    dequantize_fp8_block,
    quantize_fp8_block,
    ue8m0_value,
)
from mxserve.formats.blocks import expand_blocks


def random_weights(shape: tuple[int, ...], seed: int, spread: int) -> torch.Tensor:
    """Normal values times per-element magnitudes spread over 2^-spread..2^spread (subnormals too)."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(shape, generator=g, dtype=torch.float64)
    w *= torch.exp2(torch.randint(-spread, spread + 1, shape, generator=g).to(torch.float64))
    return w.to(torch.float32)


def half_ulp_bound(x: torch.Tensor, scale: torch.Tensor, fmt: FloatFormat) -> torch.Tensor:
    """The RNE error bound per element: s * 2^(e - m - 1), e = binade of |x|/s (at least e_min)."""
    v = (x.to(torch.float64) / scale.to(torch.float64)).abs()
    _, k = torch.frexp(v)
    e = torch.where(v == 0, fmt.min_exponent, (k - 1).clamp(min=fmt.min_exponent))
    return scale.to(torch.float64) * torch.exp2((e - fmt.mantissa_bits - 1).to(torch.float64))


shapes = st.tuples(st.integers(0, 300), st.integers(0, 300))
blocks = st.sampled_from([(128, 128), (16, 8), (1, 32), (7, 5)])


@settings(deadline=None, max_examples=40)
@given(shape=shapes, block=blocks, seed=st.integers(0, 2**31), spread=st.integers(0, 12))
def test_round_trip_within_half_ulp(shape, block, seed, spread):
    w = random_weights(shape, seed, spread)
    codes, scales = quantize_fp8_block(w, block=block)
    assert codes.dtype == torch.uint8 and scales.dtype == torch.uint8
    assert scales.shape == (-(-shape[0] // block[0]), -(-shape[1] // block[1])), scales.shape
    assert bool((scales != 255).all())
    deq = dequantize_fp8_block(codes, scales, block=block)
    scale = expand_blocks(ue8m0_value(scales), block, shape)
    assert_within(deq, w, half_ulp_bound(w, scale, E4M3FN), f"fp8 block {shape} {block}")


@pytest.mark.parametrize("fmt", [E4M3FNUZ, E5M2], ids=str)
@pytest.mark.parametrize("shape", [(0, 0), (1, 1), (0, 5), (130, 257)])
def test_round_trip_other_fp8_formats(fmt, shape):
    w = random_weights(shape, seed=sum(shape), spread=6)
    codes, scales = quantize_fp8_block(w, fmt=fmt)
    deq = dequantize_fp8_block(codes, scales, fmt=fmt)
    scale = expand_blocks(ue8m0_value(scales), (128, 128), shape)
    assert_within(deq, w, half_ulp_bound(w, scale, fmt), f"{fmt} {shape}")


def test_scale_is_pow2_ceiling_and_block_max_is_not_clipped():
    w = torch.zeros(256, 256)
    w[0, 0] = 448.0  # exactly fmt.max * 2^0 -> byte 127
    w[0, 200] = 449.0  # just above -> 2^1
    w[200, 0] = 3.0  # 3/448 -> 2^-7
    codes, scales = quantize_fp8_block(w)
    assert scales.tolist() == [[127, 128], [120, 105]]  # the all-zero block gets the 1e-4 floor: 2^-22
    deq = dequantize_fp8_block(codes, scales)
    assert deq[0, 0] == 448.0 and deq[200, 0] == 3.0 and deq[0, 200] == 448.0  # 449 -> 224.5 -> 224 * 2
    assert bool((codes[128:, 128:] == 0).all())


def test_leading_batch_dims_and_dtypes():
    w = random_weights((3, 130, 140), seed=1, spread=3).to(torch.bfloat16)
    codes, scales = quantize_fp8_block(w)
    assert codes.shape == (3, 130, 140) and scales.shape == (3, 2, 2)
    for i in range(3):
        c, s = quantize_fp8_block(w[i])
        assert_tensors_equal(codes[i], c, f"batch {i} codes")
        assert_tensors_equal(scales[i], s, f"batch {i} scales")
    bf = dequantize_fp8_block(codes, scales, dtype=torch.bfloat16)
    assert bf.dtype == torch.bfloat16
    assert_tensors_equal(bf, dequantize_fp8_block(codes, scales).to(torch.bfloat16), "bf16 output")
    typed = dequantize_fp8_block(codes.view(torch.float8_e4m3fn), scales.view(torch.float8_e8m0fnu))
    assert_tensors_equal(typed, dequantize_fp8_block(codes, scales), "typed inputs reinterpreted")


def test_errors_name_the_problem():
    with pytest.raises(ValueError, match="inf or NaN"):
        quantize_fp8_block(torch.tensor([[1.0, float("inf")]]))
    with pytest.raises(ValueError, match=r"expected \(2, 1\)"):
        dequantize_fp8_block(torch.zeros(200, 100, dtype=torch.uint8), torch.zeros(1, 1, dtype=torch.uint8))
    with pytest.raises(ValueError, match="signed 8-bit"):
        quantize_fp8_block(torch.zeros(2, 2), fmt=E4M3FN.__class__("x", 4, 2, 1, 1, True, E4M3FN.nan, 6.0))
