"""Activation fake quantization against an independent construction (torch / ml_dtypes casts)."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
import torch

from mxserve.formats import assert_tensors_equal, fake_quant_e2m1_pow2, fake_quant_fp8_pow2


def pow2_ceil_scale(amax: float, fmt_max: float) -> float:
    """2^ceil(log2(amax / fmt_max)) with the ratio rounded to float32, computed with Python math."""
    ratio = float(np.float32(amax) / np.float32(fmt_max))
    m, k = math.frexp(ratio)
    return math.ldexp(1.0, k - 1 if m == 0.5 else k)


def expected_fake_quant(x: torch.Tensor, block: int, fmt_max: float, floor: float, cast) -> torch.Tensor:
    """Block by block in float32: amax floor, pow2 scale, clamp, round via `cast`, multiply back."""
    xf = x.to(torch.float32)
    out = torch.empty_like(xf)
    for start in range(0, x.shape[-1], block):
        blk = xf[..., start : start + block]
        flat = blk.reshape(-1, blk.shape[-1])
        res = torch.empty_like(flat)
        for r in range(flat.shape[0]):
            amax = max(float(flat[r].abs().max()), float(np.float32(floor)))
            s = pow2_ceil_scale(amax, fmt_max)
            res[r] = cast((flat[r] / s).clamp(-fmt_max, fmt_max)) * s
        out[..., start : start + block] = res.reshape(blk.shape)
    return out.to(x.dtype)


def torch_e4m3fn(v: torch.Tensor) -> torch.Tensor:
    return v.to(torch.float8_e4m3fn).to(torch.float32)


def ml_e2m1(v: torch.Tensor) -> torch.Tensor:
    return torch.from_numpy(v.numpy().astype(ml_dtypes.float4_e2m1fn).astype(np.float32))


def activations(shape, seed, dtype):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g) * torch.exp2(
        torch.randint(-20, 10, (*shape[:-1], 1), generator=g).float()
    )
    x[0, :5] = 0.0  # a partly zero block
    if shape[-1] >= 64:
        x[1, :64] = 1e-7  # an all-tiny block: the amax floor decides its scale
    return x.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("n", "block"), [(256, 128), (448, 64), (200, 128)])
def test_fp8_fake_quant_matches_independent_construction(dtype, n, block):
    x = activations((6, n), seed=n + block, dtype=dtype)
    y = fake_quant_fp8_pow2(x, block=block)
    assert y.dtype == dtype and y.shape == x.shape
    assert_tensors_equal(
        y, expected_fake_quant(x, block, 448.0, 1e-4, torch_e4m3fn), f"fp8 {dtype} {n}/{block}"
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_e2m1_fake_quant_matches_independent_construction(dtype):
    x = activations((5, 128), seed=9, dtype=dtype)
    y = fake_quant_e2m1_pow2(x)
    assert_tensors_equal(y, expected_fake_quant(x, 32, 6.0, 6 * 2.0**-126, ml_e2m1), f"e2m1 {dtype}")


def test_fake_quant_is_idempotent_and_handles_empty():
    x = activations((4, 256), seed=1, dtype=torch.float32)
    y = fake_quant_fp8_pow2(x)
    assert_tensors_equal(fake_quant_fp8_pow2(y), y, "fp8 idempotent")
    z = fake_quant_e2m1_pow2(x)
    assert_tensors_equal(fake_quant_e2m1_pow2(z), z, "e2m1 idempotent")
    assert fake_quant_fp8_pow2(torch.zeros(0, 128)).shape == (0, 128)
    assert fake_quant_fp8_pow2(torch.zeros(3, 0)).shape == (3, 0)
