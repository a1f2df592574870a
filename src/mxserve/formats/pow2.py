"""Exact powers of two and the power-of-two ("UE8M0") scale rule shared by every block quantizer.

Every scale in DeepSeek-V4 is a power of two chosen by `2^ceil(log2(amax / fmt_max))` with a
floor on amax. The reference computes the ratio in float32 and takes the ceiling from its bits
(exponent, +1 if the mantissa is non-zero); `pow2_ceil_exponent` does exactly that, so scales
match the reference byte for byte. Powers of two are built from exponent bits rather than with
`exp2`/`ldexp`, whose exactness depends on the backend's math library.
"""

from __future__ import annotations

import torch

UE8M0_BIAS = 127
UE8M0_MAX_FINITE_BYTE = 254  # 255 is NaN and is never written


def exp2_int(e: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Exactly 2^e for an integer tensor `e`, as float32 (e in [-149, 127]) or float64 ([-1074, 1023]).

    Subnormal results are built from their bit pattern too, so 2^-127 (UE8M0 code 0) is exact.
    Out-of-range exponents are clamped to the range ends (callers keep them in range).
    """
    if dtype == torch.float32:
        e = e.to(torch.int32).clamp(-149, 127)
        bits = torch.where(e >= -126, (e + 127) << 23, torch.ones_like(e) << (e + 149).clamp(0, 22))
        return bits.view(torch.float32)
    if dtype == torch.float64:
        e = e.to(torch.int64).clamp(-1074, 1023)
        bits = torch.where(e >= -1022, (e + 1023) << 52, torch.ones_like(e) << (e + 1074).clamp(0, 51))
        return bits.view(torch.float64)
    raise ValueError(f"exp2_int builds float32 or float64, got {dtype=}")


def ceil_log2(r: torch.Tensor) -> torch.Tensor:
    """ceil(log2(r)) for positive finite float `r`, exactly, as int32 (from frexp: r = f * 2^k)."""
    mantissa, k = torch.frexp(r)
    return torch.where(mantissa == 0.5, k - 1, k).to(torch.int32)


def pow2_ceil_exponent(amax: torch.Tensor, fmt_max: float, amax_floor: float) -> torch.Tensor:
    """The reference scale exponent e = ceil(log2(max(amax, amax_floor) / fmt_max)), int32.

    The ratio is a float32 division, as in the reference kernels; when amax lies within one
    float32 ulp above fmt_max * 2^k the division can land on 2^k exactly and the scaled value
    exceeds fmt_max by under one float32 ulp, which the quantizer's saturation absorbs (it would
    round to fmt_max anyway), so no value is clipped beyond its own rounding. A non-finite amax
    gives 127 (UE8M0 byte 254).
    """
    ratio = amax.to(torch.float32).clamp(min=amax_floor) / fmt_max
    # inf/NaN amax (garbage in): the largest exponent a UE8M0 byte can hold, never a small one
    return torch.where(torch.isfinite(ratio), ceil_log2(ratio), UE8M0_MAX_FINITE_BYTE - UE8M0_BIAS)


def ue8m0_byte(e: torch.Tensor) -> torch.Tensor:
    """The UE8M0 byte for scale 2^e: e + 127 clamped to [0, 254] (255 is NaN and never written)."""
    return (e.to(torch.int32) + UE8M0_BIAS).clamp(0, UE8M0_MAX_FINITE_BYTE).to(torch.uint8)


def ue8m0_value(scale_bytes: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """2^(b - 127) for UE8M0 bytes b (uint8); byte 255 gives NaN."""
    b = scale_bytes.to(torch.int32)
    value = exp2_int(b - UE8M0_BIAS, dtype)
    return torch.where(b == 255, torch.full_like(value, float("nan")), value)
