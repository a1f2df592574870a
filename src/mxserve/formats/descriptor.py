"""Number formats as data: one descriptor per format, spelled as the OCP MX spec does.

A `FloatFormat` says everything a codec needs (exponent/mantissa bits, bias, how NaN and
infinity are encoded, the largest finite value); the codecs in `codec.py` are written once
against the descriptor, not once per format.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class NanEncoding(StrEnum):
    IEEE = "ieee"  # exponent all ones: inf if mantissa 0, NaN otherwise (e5m2)
    ALL_ONES = "all_ones"  # only exponent+mantissa all ones is NaN, no inf (e4m3fn; 0xFF in ue8m0)
    NEGATIVE_ZERO = "negative_zero"  # the code of -0 (0x80) is the one NaN, no inf (e4m3fnuz)
    NONE = "none"  # every code is a finite number (e2m1, int8)


@dataclass(frozen=True)
class FloatFormat:
    """A small floating-point (or integer) storage format.

    `bits` is the code width. For `is_integer` formats exponent/mantissa are unused. Value of a
    normal code: (-1)^s * 2^(e - bias) * (1 + m / 2^mantissa_bits); subnormals (e == 0):
    (-1)^s * 2^(1 - bias) * (m / 2^mantissa_bits). Unsigned formats have no sign bit.
    A format without subnormals (`has_subnormals=False`, only UE8M0) reads exponent field 0 as
    the normal exponent -bias: UE8M0 code 0 is 2^-127, and the format has no zero.
    """

    name: str
    bits: int
    exponent_bits: int
    mantissa_bits: int
    bias: int
    is_signed: bool
    nan: NanEncoding
    max_finite: float
    is_integer: bool = False
    has_subnormals: bool = True

    @property
    def num_codes(self) -> int:
        return 1 << self.bits

    @property
    def has_inf(self) -> bool:
        return self.nan is NanEncoding.IEEE

    @property
    def magnitude_bits(self) -> int:
        """Bits below the sign bit (all of them for unsigned formats)."""
        return self.bits - 1 if self.is_signed else self.bits

    @property
    def min_exponent(self) -> int:
        """Unbiased exponent of the smallest binade; subnormals share it with exponent field 1."""
        return 1 - self.bias if self.has_subnormals else -self.bias

    @property
    def nan_code(self) -> int | None:
        """The code `encode` writes for NaN input (the positive quiet NaN), None where no NaN exists."""
        top = (1 << self.magnitude_bits) - 1
        if self.nan is NanEncoding.ALL_ONES:
            return top
        if self.nan is NanEncoding.NEGATIVE_ZERO:
            return 1 << (self.bits - 1)
        if self.nan is NanEncoding.IEEE:
            # exponent all ones, top mantissa bit set: the quiet NaN ml_dtypes and torch write
            return (((1 << self.exponent_bits) - 1) << self.mantissa_bits) | (1 << (self.mantissa_bits - 1))
        return None

    def is_nan_code(self, code: int) -> bool:
        """Whether `code` (0 <= code < num_codes) decodes to NaN."""
        mag = code & ((1 << self.magnitude_bits) - 1)
        if self.nan is NanEncoding.ALL_ONES:
            return mag == (1 << self.magnitude_bits) - 1
        if self.nan is NanEncoding.NEGATIVE_ZERO:
            return code == 1 << (self.bits - 1)
        if self.nan is NanEncoding.IEEE:
            exp_all_ones = (mag >> self.mantissa_bits) == (1 << self.exponent_bits) - 1
            return exp_all_ones and (mag & ((1 << self.mantissa_bits) - 1)) != 0
        return False

    def __str__(self) -> str:
        return self.name


E2M1 = FloatFormat("e2m1", 4, 2, 1, 1, True, NanEncoding.NONE, 6.0)
E4M3FN = FloatFormat("e4m3fn", 8, 4, 3, 7, True, NanEncoding.ALL_ONES, 448.0)
E4M3FNUZ = FloatFormat("e4m3fnuz", 8, 4, 3, 8, True, NanEncoding.NEGATIVE_ZERO, 240.0)
E5M2 = FloatFormat("e5m2", 8, 5, 2, 15, True, NanEncoding.IEEE, 57344.0)
# UE8M0: an unsigned power-of-two exponent byte, value 2^(b - 127); 0xFF is NaN.
UE8M0 = FloatFormat("ue8m0", 8, 8, 0, 127, False, NanEncoding.ALL_ONES, 2.0**127, has_subnormals=False)
INT8 = FloatFormat("int8", 8, 0, 0, 0, True, NanEncoding.NONE, 127.0, is_integer=True)

ALL_FORMATS: tuple[FloatFormat, ...] = (E2M1, E4M3FN, E4M3FNUZ, E5M2, UE8M0, INT8)
FORMATS_BY_NAME: dict[str, FloatFormat] = {f.name: f for f in ALL_FORMATS}
