"""Exact powers of two, the pow2 ceiling scale rule, and E2M1 nibble packing."""

from __future__ import annotations

import math

import pytest
import torch

from mxserve.formats import (
    as_uint8_bytes,
    assert_tensors_equal,
    exp2_int,
    pack_e2m1,
    pow2_ceil_exponent,
    ue8m0_byte,
    ue8m0_value,
    unpack_e2m1,
)


@pytest.mark.parametrize(("dtype", "lo", "hi"), [(torch.float32, -149, 127), (torch.float64, -1074, 1023)])
def test_exp2_int_is_exact_over_its_range(dtype, lo, hi):
    e = torch.arange(lo, hi + 1)
    expected = torch.tensor([math.ldexp(1.0, int(i)) for i in e], dtype=dtype)
    assert_tensors_equal(exp2_int(e, dtype), expected, f"exp2_int {dtype}")


def test_ue8m0_value_of_every_byte_matches_torch_e8m0():
    b = torch.arange(256, dtype=torch.uint8)
    assert_tensors_equal(ue8m0_value(b), b.view(torch.float8_e8m0fnu).to(torch.float32), "ue8m0_value")


def test_pow2_ceil_exponent_rule():
    amax = torch.tensor([448.0, 448.0 * 1.0000001, 449.0, 224.0, 1.0, 0.0, 1e-4, 1e-9, 448.0 * 2**-10])
    e = pow2_ceil_exponent(amax, 448.0, 1e-4)
    expected = [0, 1, 1, -1, math.ceil(math.log2(1 / 448)), -22, -22, -22, -10]
    assert e.tolist() == expected
    assert pow2_ceil_exponent(torch.tensor([float("inf"), float("nan")]), 448.0, 1e-4).tolist() == [127, 127]
    assert ue8m0_byte(torch.tensor([-200, -127, 0, 127, 128, 500])).tolist() == [0, 0, 127, 254, 254, 254]


def test_pack_low_nibble_is_even_column():
    codes = torch.tensor([[1, 2, 3, 4, 5]], dtype=torch.uint8)
    packed = pack_e2m1(codes)
    assert packed.tolist() == [[0x21, 0x43, 0x05]]  # odd count pads a zero code in the last high nibble
    assert_tensors_equal(unpack_e2m1(packed, num_cols=5), codes, "unpack odd")
    assert_tensors_equal(
        unpack_e2m1(packed), torch.tensor([[1, 2, 3, 4, 5, 0]], dtype=torch.uint8), "unpack full"
    )


def test_pack_round_trip_every_pair_and_batch_dims():
    b = torch.arange(256, dtype=torch.uint8)
    codes = torch.stack((b & 0xF, b >> 4), dim=-1).reshape(2, 8, 32)  # byte k as (low, high) codes
    assert_tensors_equal(unpack_e2m1(pack_e2m1(codes)), codes, "pack round trip")
    assert_tensors_equal(
        pack_e2m1(codes).reshape(-1), torch.arange(256, dtype=torch.uint8), "every byte once"
    )


def test_pack_rejects_bad_codes_and_sizes():
    with pytest.raises(ValueError, match="< 16"):
        pack_e2m1(torch.tensor([16], dtype=torch.uint8))
    with pytest.raises(ValueError, match="num_cols"):
        unpack_e2m1(torch.zeros(3, dtype=torch.uint8), num_cols=8)
    assert unpack_e2m1(torch.zeros(4, 0, dtype=torch.uint8)).shape == (4, 0)
    assert pack_e2m1(torch.zeros(4, 0, dtype=torch.uint8)).shape == (4, 0)


def test_as_uint8_bytes_reinterprets_never_casts():
    s = torch.tensor([2.0**-7, 1.0, 2.0**100]).to(torch.float8_e8m0fnu)
    assert as_uint8_bytes(s).tolist() == [120, 127, 227]  # a numeric cast would give 0, 1, 255
    assert as_uint8_bytes(torch.tensor([-1], dtype=torch.int8)).tolist() == [255]
    assert as_uint8_bytes(torch.tensor([1.0]).to(torch.float8_e4m3fn)).tolist() == [0x38]
    with pytest.raises(ValueError, match="one-byte"):
        as_uint8_bytes(torch.zeros(2))
