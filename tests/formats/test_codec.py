"""Scalar codecs against ml_dtypes and torch's float8 dtypes, over every code and on ties."""

from __future__ import annotations

import itertools
import math

import ml_dtypes
import numpy as np
import pytest
import torch

from mxserve.formats import (
    E2M1,
    E4M3FN,
    E4M3FNUZ,
    E5M2,
    INT8,
    UE8M0,
    FloatFormat,
    assert_tensors_equal,
    code_value,
    decode,
    encode,
    pack_e2m1,
    round_to_format,
    unpack_e2m1,
)

ML_DTYPES = {
    E4M3FN: ml_dtypes.float8_e4m3fn,
    E4M3FNUZ: ml_dtypes.float8_e4m3fnuz,
    E5M2: ml_dtypes.float8_e5m2,
    UE8M0: ml_dtypes.float8_e8m0fnu,
    E2M1: ml_dtypes.float4_e2m1fn,
}
TORCH_DTYPES = {
    E4M3FN: torch.float8_e4m3fn,
    E4M3FNUZ: torch.float8_e4m3fnuz,
    E5M2: torch.float8_e5m2,
    UE8M0: torch.float8_e8m0fnu,
}
FLOAT_FORMATS = list(ML_DTYPES)


def all_codes(fmt: FloatFormat) -> torch.Tensor:
    return torch.arange(fmt.num_codes, dtype=torch.uint8)


def ml_decode(codes: np.ndarray, fmt: FloatFormat) -> torch.Tensor:
    return torch.from_numpy(codes.astype(np.uint8).view(ML_DTYPES[fmt]).astype(np.float32))


def ml_encode(x: np.ndarray, fmt: FloatFormat) -> torch.Tensor:
    return torch.from_numpy(x.astype(ML_DTYPES[fmt]).view(np.uint8).copy())


def finite_codes(fmt: FloatFormat) -> list[int]:
    return [c for c in range(fmt.num_codes) if math.isfinite(code_value(c, fmt))]


# --- decode, every code ---------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FLOAT_FORMATS, ids=str)
def test_decode_every_code_matches_ml_dtypes(fmt):
    codes = all_codes(fmt)
    assert_tensors_equal(
        decode(codes, fmt), ml_decode(codes.numpy(), fmt), f"decode {fmt}", signed_zeros=True
    )


@pytest.mark.parametrize("fmt", list(TORCH_DTYPES), ids=str)
def test_decode_every_code_matches_torch_dtype(fmt):
    codes = all_codes(fmt)
    expected = codes.view(TORCH_DTYPES[fmt]).to(torch.float32)
    assert_tensors_equal(decode(codes, fmt), expected, f"decode {fmt} vs torch", signed_zeros=True)
    # a tensor already in the torch dtype is reinterpreted, not cast
    assert_tensors_equal(decode(codes.view(TORCH_DTYPES[fmt]), fmt), expected, f"decode {fmt} typed input")


def test_e2m1_every_code_in_both_nibbles():
    # all 256 bytes = every (low, high) pair: the low nibble is the even column
    packed = torch.arange(256, dtype=torch.uint8).reshape(256, 1)
    pairs = decode(unpack_e2m1(packed), E2M1)
    low = ml_decode(np.arange(256) & 0xF, E2M1)
    high = ml_decode(np.arange(256) >> 4, E2M1)
    assert_tensors_equal(pairs[:, 0], low, "even column (low nibble)", signed_zeros=True)
    assert_tensors_equal(pairs[:, 1], high, "odd column (high nibble)", signed_zeros=True)
    # and ml_dtypes' own e2m1 codes equal ours one per byte
    values = ml_decode(np.arange(16), E2M1)
    assert_tensors_equal(
        pack_e2m1(encode(values, E2M1)).view(-1),
        torch.tensor([0x10, 0x32, 0x54, 0x76, 0x98, 0xBA, 0xDC, 0xFE], dtype=torch.uint8),
        "packed table",
    )


def test_e2m1_matches_spec_table():
    spec = [0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6]
    assert_tensors_equal(decode(all_codes(E2M1), E2M1), torch.tensor(spec), "e2m1 table", signed_zeros=True)


def test_int8_decode_is_twos_complement():
    codes = all_codes(INT8)
    assert_tensors_equal(decode(codes, INT8), codes.view(torch.int8).to(torch.float32), "int8 decode")


@pytest.mark.parametrize("fmt", FLOAT_FORMATS, ids=str)
def test_descriptor_max_and_nan_code_agree_with_table(fmt):
    values = decode(all_codes(fmt), fmt)
    finite = values[torch.isfinite(values)]
    assert float(finite.max()) == fmt.max_finite, (float(finite.max()), fmt.max_finite)
    if fmt.nan_code is not None:
        assert math.isnan(float(values[fmt.nan_code])), (
            f"{fmt} nan_code {fmt.nan_code:#x} decodes to {values[fmt.nan_code]}"
        )
        assert ml_encode(np.array([np.nan], np.float32), fmt)[0] == fmt.nan_code


# --- encode ----------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FLOAT_FORMATS, ids=str)
def test_encode_inverts_decode_on_every_finite_code(fmt):
    codes = torch.tensor(finite_codes(fmt), dtype=torch.uint8)
    assert_tensors_equal(encode(decode(codes, fmt), fmt), codes, f"encode(decode(c)) {fmt}")


def random_in_range(fmt: FloatFormat, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    lo = fmt.min_exponent - fmt.mantissa_bits - 3  # reach below the smallest subnormal
    hi = math.log2(fmt.max_finite)
    x = np.exp2(rng.uniform(lo, hi, n)) * (rng.uniform(1.0, 2.0, n) / 1.5)
    if fmt.is_signed:
        x *= rng.choice([-1.0, 1.0], n)
    x = x.astype(np.float32)
    keep = np.abs(x) <= fmt.max_finite
    if fmt is UE8M0:
        keep &= (
            np.abs(x) >= 2.0**-126
        )  # ml_dtypes rounds float32 subnormals on bits: see test_ue8m0_rounding_rules
    return x[keep]


@pytest.mark.parametrize("fmt", FLOAT_FORMATS, ids=str)
def test_encode_matches_ml_dtypes_on_random_values(fmt):
    x = random_in_range(fmt, 200_000, seed=fmt.bits * 31 + fmt.bias)
    assert_tensors_equal(encode(torch.from_numpy(x), fmt), ml_encode(x, fmt), f"encode {fmt} random")


@pytest.mark.parametrize("fmt", FLOAT_FORMATS, ids=str)
def test_encode_matches_ml_dtypes_on_ties_and_their_neighbours(fmt):
    values = sorted({code_value(c, fmt) for c in finite_codes(fmt)})
    positive = [v for v in values if v >= 0]
    exact_mids = [(a + b) / 2 for a, b in itertools.pairwise(positive)]
    mids = np.array(exact_mids, np.float32)
    assert np.all(mids.astype(np.float64) == exact_mids), "midpoints must be exact in float32"
    up = np.nextafter(mids, np.float32(np.inf))
    down = np.nextafter(mids, np.float32(0))
    probes = np.concatenate([mids, up, down])
    if fmt.is_signed:
        probes = np.concatenate([probes, -probes])
    ours = encode(torch.from_numpy(probes), fmt)
    comparable = np.abs(probes) >= (2.0**-126 if fmt is UE8M0 else 0.0)  # see random_in_range
    assert_tensors_equal(ours[comparable], ml_encode(probes[comparable], fmt), f"encode {fmt} ties")
    # ties go to the even code (the even mantissa), for UE8M0 (no mantissa bits) always upward
    n = len(mids)
    lower = encode(torch.tensor(positive[:-1]), fmt)
    tie_codes = ours[:n].to(torch.int32)
    if fmt.mantissa_bits:
        assert bool((tie_codes % 2 == 0).all()), f"{fmt}: odd code at a tie: {tie_codes.tolist()}"
    else:
        assert_tensors_equal(
            tie_codes,
            lower[1:].to(torch.int32) if fmt is not UE8M0 else lower.to(torch.int32) + 1,
            "ue8m0 ties up",
        )
    assert_tensors_equal(ours[n : 2 * n].to(torch.int32), lower.to(torch.int32) + 1, f"{fmt} just above tie")
    assert_tensors_equal(ours[2 * n : 3 * n], lower, f"{fmt} just below tie")


@pytest.mark.parametrize("fmt", [E4M3FN, E4M3FNUZ, E5M2, E2M1], ids=str)
def test_encode_saturates_and_never_makes_nan_from_finite(fmt):
    big = torch.tensor([fmt.max_finite * 1.01, fmt.max_finite * 1.5, 1e30, 3.4e38, math.inf])
    x = torch.cat([big, -big])
    codes = encode(x, fmt)
    values = decode(codes, fmt)
    expected = torch.cat([torch.full_like(big, fmt.max_finite), torch.full_like(big, -fmt.max_finite)])
    assert_tensors_equal(values, expected, f"{fmt} saturation")
    # ml_dtypes agrees at the largest value itself
    assert_tensors_equal(codes[:1], ml_encode(np.array([fmt.max_finite], np.float32), fmt), "max code")


def test_e5m2_never_writes_inf():
    codes = encode(torch.tensor([math.inf, -math.inf, 1e6]), E5M2)
    assert codes.tolist() == [0x7B, 0xFB, 0x7B], [hex(c) for c in codes.tolist()]


@pytest.mark.parametrize("fmt", [E4M3FN, E4M3FNUZ, E5M2, UE8M0], ids=str)
def test_nan_input_gives_nan_code(fmt):
    codes = encode(torch.tensor([math.nan, 1.0]), fmt)
    assert codes[0] == fmt.nan_code and math.isnan(float(decode(codes, fmt)[0])), codes


@pytest.mark.parametrize("fmt", [E2M1, INT8], ids=str)
def test_nan_input_raises_without_nan_code(fmt):
    with pytest.raises(ValueError, match="no NaN code"):
        encode(torch.tensor([1.0, math.nan]), fmt)


def test_signed_zero():
    x = torch.tensor([-0.0, -1e-30, 0.0])
    assert encode(x, E4M3FN).tolist() == [0x80, 0x80, 0x00]
    assert encode(x, E2M1).tolist() == [0x8, 0x8, 0x0]
    assert encode(x, E4M3FNUZ).tolist() == [0x00, 0x00, 0x00]  # 0x80 is FNUZ's NaN


def test_ue8m0_rounding_rules():
    # linear-domain RNE: 1.5 * 2^e (the tie) and above round up; zero and underflow -> code 0 (2^-127);
    # float32-subnormal input rounds by value (1.4 * 2^-127 -> code 0, 1.6 * 2^-127 -> code 1)
    x = torch.tensor(
        [
            1.0,
            1.4,
            1.5,
            3.0,
            0.75,
            0.0,
            2.0**-127,
            2.0**-130,
            2.0**127,
            1e38,
            1.3e38,
            0.7,
            1.4 * 2.0**-127,
            1.6 * 2.0**-127,
        ]
    )
    expected = [127, 127, 128, 129, 127, 0, 0, 0, 254, 253, 254, 126, 0, 1]
    assert encode(x, UE8M0).tolist() == expected
    with pytest.raises(ValueError, match="unsigned"):
        encode(torch.tensor([-1.0]), UE8M0)


def test_int8_encode_rounds_half_even_and_saturates():
    x = torch.tensor([0.5, 1.5, 2.5, -0.5, -1.5, 126.6, 300.0, -300.0, -127.4])
    codes = encode(x, INT8)
    assert codes.view(torch.int8).tolist() == [0, 2, 2, 0, -2, 127, 127, -127, -127]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float64])
def test_encode_other_input_dtypes(dtype):
    x = torch.from_numpy(random_in_range(E4M3FN, 20_000, seed=7)).to(dtype)
    expected = ml_encode(x.to(torch.float64).numpy(), E4M3FN)
    assert_tensors_equal(encode(x, E4M3FN), expected, f"encode from {dtype}")


def test_float64_input_is_not_double_rounded():
    # 1.0625 is the midpoint of e4m3fn 1.0 and 1.125; a hair above it must round up, but the same
    # value rounded to float32 first lands on the midpoint and would round down to 1.0 (even).
    x = torch.tensor([1.0625 + 2.0**-40], dtype=torch.float64)
    assert float(x.to(torch.float32)) == 1.0625
    assert encode(x, E4M3FN).tolist() == [0x39]  # 1.125
    assert encode(x.to(torch.float32), E4M3FN).tolist() == [0x38]  # 1.0


@pytest.mark.parametrize("fmt", [E4M3FN, E4M3FNUZ, E5M2, E2M1], ids=str)
def test_round_to_format_equals_decode_of_encode(fmt):
    x = torch.from_numpy(random_in_range(fmt, 50_000, seed=3)) * 1.3  # some beyond max too
    # FNUZ has no -0 code, so only there the value-domain -0 and the decoded +0 differ in sign
    signed = fmt is not E4M3FNUZ
    assert_tensors_equal(
        round_to_format(x, fmt), decode(encode(x, fmt), fmt), f"round_to_format {fmt}", signed_zeros=signed
    )
    assert torch.isnan(round_to_format(torch.tensor([math.nan]), fmt)).all()


def test_comparator_reports_first_mismatch_coordinates():
    a = torch.zeros(3, 4)
    b = a.clone()
    b[1, 2] = 5.0
    b[2, 0] = 1.0
    with pytest.raises(
        AssertionError, match=r"2 of 12 elements differ; first at \(1, 2\): actual 0.0, expected 5.0"
    ):
        assert_tensors_equal(a, b, "probe")
