"""Exact scalar codecs written once against `FloatFormat`: `decode`, `encode`, `round_to_format`.

Decode is a per-format lookup table (16 or 256 float32 entries, built from the descriptor and
cached per device): exact for every code, subnormals and specials included. Encode is
round-to-nearest-even computed from the descriptor: take the binade e = floor(log2|x|) (at least
the format's smallest), count |x| in units of that binade's quantum 2^(e - mantissa_bits), round
that count half-to-even, and assemble the code. Codes of an IEEE-style format are monotone in
magnitude, so the code is just (e - e_min) * 2^m + count, which also handles the carry into the
next binade and the subnormal/normal boundary without special cases.

Encode contract (all formats):
* Finite input saturates to +-max_finite; infinities saturate too (this is the "satfinite"
  mode; even E5M2, which has an inf code, never gets one). Finite input never gives NaN.
* NaN input gives `fmt.nan_code`; formats without NaN (E2M1, INT8) raise ValueError.
* -0.0 keeps its sign bit where the format has a -0 (E4M3FN 0x80, E2M1 0x8); E4M3FNUZ, whose 0x80
  is NaN, writes +0 for -0 and for negative values that round to zero.
* UE8M0 (unsigned powers of two, no zero): non-powers round to nearest-even in the linear
  domain, so between 2^e and 2^(e+1) the tie 1.5 * 2^e and everything above it round up (the even
  neighbour of a tie is always the larger one; this is also what ml_dtypes does). Zero and values
  below 2^-128 become code 0 (2^-127, the smallest value); negative input raises ValueError.
  Rounding is in the linear domain for float32-subnormal input too (1.4 * 2^-127 -> 2^-127);
  ml_dtypes 0.6 rounds those on the bit pattern instead (1.4 * 2^-127 -> 2^-126).
* INT8: round half to even, saturate to [-127, 127] (symmetric), two's complement byte.
* E2M1 codes are one per byte in the low 4 bits (high bits zero); decode reads only the low 4 bits.
"""

from __future__ import annotations

import functools
import math

import torch

from mxserve.formats.bytes_view import as_uint8_bytes
from mxserve.formats.descriptor import FloatFormat, NanEncoding
from mxserve.formats.pow2 import exp2_int


def code_value(code: int, fmt: FloatFormat) -> float:
    """The exact value of one code (a Python float; NaN for NaN codes, +-inf for E5M2's inf)."""
    if not 0 <= code < fmt.num_codes:
        raise ValueError(f"code {code} out of range for {fmt} ({fmt.num_codes} codes)")
    if fmt.is_integer:
        return float(code - fmt.num_codes if fmt.is_signed and code >= fmt.num_codes // 2 else code)
    if fmt.is_nan_code(code):
        return math.nan
    negative = fmt.is_signed and code >> (fmt.bits - 1) == 1
    mag = code & ((1 << fmt.magnitude_bits) - 1)
    exp_field = mag >> fmt.mantissa_bits
    mantissa = mag & ((1 << fmt.mantissa_bits) - 1)
    if fmt.nan is NanEncoding.IEEE and exp_field == (1 << fmt.exponent_bits) - 1:
        value = math.inf  # the NaN codes of this exponent were handled above
    elif exp_field == 0 and fmt.has_subnormals:
        value = math.ldexp(mantissa, fmt.min_exponent - fmt.mantissa_bits)
    else:
        value = math.ldexp((1 << fmt.mantissa_bits) + mantissa, exp_field - fmt.bias - fmt.mantissa_bits)
    return -value if negative else value


@functools.lru_cache(maxsize=64)
def decode_table(fmt: FloatFormat, device: torch.device) -> torch.Tensor:
    """float32 [num_codes] table of every code's value (cached per format and device)."""
    return torch.tensor(
        [code_value(c, fmt) for c in range(fmt.num_codes)], dtype=torch.float32, device=device
    )


def decode(codes: torch.Tensor, fmt: FloatFormat) -> torch.Tensor:
    """Values of `codes` (uint8, or any one-byte dtype, reinterpreted) as float32, same shape.

    Exact for every code of every format (all values are float32-representable).
    """
    codes = as_uint8_bytes(codes)
    table = decode_table(fmt, codes.device)
    if fmt.bits == 4:
        codes = codes & 0xF
    return table[codes.to(torch.int64)]


def _work_dtype(x: torch.Tensor) -> torch.dtype:
    # float64 input is rounded from float64 directly: going through float32 first could round
    # onto a midpoint and then round the wrong way (double rounding).
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def _round_magnitude(a: torch.Tensor, fmt: FloatFormat) -> tuple[torch.Tensor, torch.Tensor]:
    """For |x| = a (already clamped to max_finite): binade e (int32) and the RNE count n of quanta.

    The rounded magnitude is n * 2^(e - mantissa_bits), n in [0, 2^(m+1)] (2^(m+1) = carry).
    """
    _, k = torch.frexp(a)  # a = f * 2^k with f in [0.5, 1), so floor(log2 a) = k - 1
    e = (k.to(torch.int32) - 1).clamp(min=fmt.min_exponent)
    e = torch.where(a == 0, fmt.min_exponent, e)  # frexp(0) reports exponent 0, not -inf
    # a * 2^-(e - m) is exact (a power-of-two scaling of a value that stays normal), and torch.round
    # rounds half to even.
    n = torch.round(a * exp2_int(fmt.mantissa_bits - e, a.dtype))
    return e, n


def round_to_format(x: torch.Tensor, fmt: FloatFormat) -> torch.Tensor:
    """x rounded to the nearest value of a signed float format (RNE, saturating), as float.

    The value-domain half of `encode` (no codes, no host sync): NaN stays NaN, -0 stays -0.
    Result dtype is float32 (float64 for float64 input). Only for signed formats with subnormals.
    """
    if fmt.is_integer or not fmt.is_signed or not fmt.has_subnormals:
        raise ValueError(f"round_to_format supports signed float formats with subnormals, got {fmt}")
    xf = x.to(_work_dtype(x))
    a = xf.abs().clamp(max=fmt.max_finite)
    e, n = _round_magnitude(a, fmt)
    return torch.copysign(n * exp2_int(e - fmt.mantissa_bits, xf.dtype), xf)


def _encode_integer(x: torch.Tensor, fmt: FloatFormat) -> torch.Tensor:
    xf = x.to(_work_dtype(x))
    if bool(torch.isnan(xf).any()):
        raise ValueError(f"{fmt} has no NaN code; input contains NaN")
    n = torch.round(xf.clamp(-fmt.max_finite, fmt.max_finite)).to(torch.int32)
    return (n & 0xFF).to(torch.uint8)


def encode(x: torch.Tensor, fmt: FloatFormat, validate: bool = True) -> torch.Tensor:
    """Codes (uint8, same shape) of x rounded to `fmt`; see the module docstring for the contract.

    `validate=False` skips the two checks that need a host sync (NaN into a format without a NaN
    code, negative input to an unsigned format) for hot paths whose input is known clean; such
    input then gets an unspecified code instead of a ValueError. Formats with a NaN code never sync.
    """
    if fmt.is_integer:
        return _encode_integer(x, fmt)
    xf = x.to(_work_dtype(x))
    is_nan = torch.isnan(xf)
    if validate and fmt.nan_code is None and bool(is_nan.any()):
        raise ValueError(f"{fmt} has no NaN code; input contains NaN")
    if validate and not fmt.is_signed and bool((xf < 0).any()):
        raise ValueError(f"{fmt} is unsigned; input contains negative values")
    a = xf.abs().clamp(max=fmt.max_finite)
    e, n = _round_magnitude(a, fmt)
    m = fmt.mantissa_bits
    mag = (e - fmt.min_exponent) * (1 << m) + n.to(torch.int32)
    if not fmt.has_subnormals:
        # no implicit zero below the smallest binade: count 2^m is the binade's first code, and
        # anything that rounded to 0 saturates to code 0 (the smallest value)
        mag = (mag - (1 << m)).clamp(min=0)
    code = mag
    if fmt.is_signed:
        sign = torch.signbit(xf)
        if fmt.nan is NanEncoding.NEGATIVE_ZERO:
            sign = sign & (mag != 0)  # 0x80 is this format's NaN, zero is always +0
        code = code | (sign.to(torch.int32) << (fmt.bits - 1))
    if fmt.nan_code is not None:
        code = torch.where(is_nan, torch.full_like(code, fmt.nan_code), code)
    return code.to(torch.uint8)
