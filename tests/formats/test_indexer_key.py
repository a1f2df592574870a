"""Indexer key codecs (spec §8.2): FP8 with one fp32 pow2 scale per key, and MXFP4."""

from __future__ import annotations

import torch

from mxserve.formats import (
    E2M1,
    E4M3FN,
    assert_tensors_equal,
    assert_within,
    decode_indexer_key_fp8,
    decode_indexer_key_mxfp4,
    encode_indexer_key_fp8,
    encode_indexer_key_mxfp4,
    fake_quant_e2m1_pow2,
)

from .test_block_fp8 import half_ulp_bound


def keys(seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(4, 9, 128, generator=g) * torch.exp2(
        torch.randint(-15, 6, (4, 9, 1), generator=g).float()
    )


def test_fp8_key_scale_rule_and_round_trip():
    k = keys(0)
    k[0, 0] = 0.0  # floor 1e-4 -> 2^-22
    k[0, 1] = 0.0
    k[0, 1, 5] = 448.0  # exactly 448 -> scale 1
    codes, scale = encode_indexer_key_fp8(k)
    assert codes.shape == (4, 9, 128) and codes.dtype == torch.uint8
    assert scale.shape == (4, 9) and scale.dtype == torch.float32
    assert scale[0, 0] == 2.0**-22 and scale[0, 1] == 1.0
    mant, _ = torch.frexp(scale)
    assert bool((mant == 0.5).all()), "scales must be powers of two"
    assert bool((k.abs().amax(-1) <= 448 * scale).all()) and bool((k.abs().amax(-1) > 224 * scale)[1:].all())
    y = decode_indexer_key_fp8(codes, scale)
    assert_within(y, k, half_ulp_bound(k, scale.unsqueeze(-1).expand_as(k), E4M3FN), "fp8 key half-ulp")


def test_mxfp4_key_layout_and_equals_fp4_act_quant():
    k = keys(1)
    packed, scales = encode_indexer_key_mxfp4(k)
    assert packed.shape == (4, 9, 64) and scales.shape == (4, 9, 4)
    y = decode_indexer_key_mxfp4(packed, scales)
    # same numbers as the reference's fp4_act_quant simulation (blocks of 32, floor 6 * 2^-126)
    assert_tensors_equal(y, fake_quant_e2m1_pow2(k), "mxfp4 key == fp4_act_quant")
    s = torch.exp2(scales.float() - 127).repeat_interleave(32, dim=-1)
    assert_within(y, k, half_ulp_bound(k, s, E2M1), "mxfp4 key half-ulp")


def test_mxfp4_key_writer_does_not_raise_on_nan():
    # the per-step writer skips validation (no host sync); garbage in, some codes out, no exception
    k = torch.zeros(2, 128)
    k[0, 3] = float("nan")
    packed, scales = encode_indexer_key_mxfp4(k)
    assert packed.shape == (2, 64) and scales[1].tolist() == [1, 1, 1, 1]
