"""MXFP4: round-trip error within half an ulp at each group's scale, odd widths, scale rule."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mxserve.formats import (
    E2M1,
    assert_tensors_equal,
    assert_within,
    dequantize_mxfp4,
    quantize_mxfp4,
    ue8m0_value,
    unpack_e2m1,
)
from mxserve.formats.mxfp4 import expand_groups

from .test_block_fp8 import half_ulp_bound, random_weights


@settings(deadline=None, max_examples=40)
@given(
    shape=st.tuples(st.integers(0, 70), st.integers(0, 300)),
    seed=st.integers(0, 2**31),
    spread=st.integers(0, 8),
)
def test_round_trip_within_half_ulp(shape, seed, spread):
    w = random_weights(shape, seed, spread)
    packed, scales = quantize_mxfp4(w)
    assert packed.shape == (shape[0], (shape[1] + 1) // 2), packed.shape
    assert scales.shape == (shape[0], -(-shape[1] // 32)), scales.shape
    deq = dequantize_mxfp4(packed, scales, num_cols=shape[1])
    scale = expand_groups(ue8m0_value(scales), shape[1])
    # e2m1 has 1 mantissa bit: the bound is s * 2^(e - 2) with e the binade of |x|/s (>= 0)
    assert_within(deq, w, half_ulp_bound(w, scale, E2M1), f"mxfp4 {shape}")
    if shape[1] % 2:  # the padding nibble of an odd row is a zero code
        assert bool((unpack_e2m1(packed)[:, -1] == 0).all())


def test_scale_rule_and_floor():
    w = torch.zeros(1, 96)
    w[0, 0] = 6.0  # -> 2^0, byte 127
    w[0, 32] = 6.5  # -> 2^1
    codes, scales = quantize_mxfp4(w)
    assert scales.tolist() == [[127, 128, 1]]  # all-zero group: floor 6 * 2^-126 -> 2^-126
    deq = dequantize_mxfp4(codes, scales)
    assert deq[0, 0] == 6.0 and deq[0, 32] == 6.0  # 6.5 / 2 = 3.25 -> 3


def test_odd_width_and_typed_inputs():
    w = random_weights((5, 33), seed=4, spread=2)
    packed, scales = quantize_mxfp4(w)
    deq = dequantize_mxfp4(packed, scales, num_cols=33)
    assert deq.shape == (5, 33)
    typed = dequantize_mxfp4(packed.view(torch.int8), scales.view(torch.float8_e8m0fnu), num_cols=33)
    assert_tensors_equal(typed, deq, "typed inputs")
    assert_tensors_equal(
        dequantize_mxfp4(packed, scales, num_cols=33, dtype=torch.bfloat16),
        deq.to(torch.bfloat16),
        "bf16 output",
    )
    with pytest.raises(ValueError, match="num_cols"):
        dequantize_mxfp4(packed, scales, num_cols=40)


def test_errors():
    with pytest.raises(ValueError, match="inf or NaN"):
        quantize_mxfp4(torch.tensor([[float("nan")]]))
