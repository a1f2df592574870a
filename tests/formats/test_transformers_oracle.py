"""Independent oracle: our FP8-block and MXFP4 dequantization equal transformers' on the same bytes.

transformers' `Fp8Dequantize._dequantize_one` (integrations/finegrained_fp8.py) is an independent
implementation: it unpacks FP4 through its own `_FP4_E2M1_LUT`, widens FP8 with torch's cast and
turns UE8M0 bytes into scales with exp2. We call it, we do not reimplement it. It needs shapes that
are multiples of the block.
"""

from __future__ import annotations

import pytest
import torch

from mxserve.formats import assert_tensors_equal, dequantize_fp8_block, dequantize_mxfp4

fp8_module = pytest.importorskip("transformers.integrations.finegrained_fp8")


def oracle(quantized: torch.Tensor, scales: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return fp8_module.Fp8Dequantize(None)._dequantize_one(quantized, scales, output_dtype=dtype)


def random_bytes(shape: tuple[int, ...], seed: int, lo: int = 0, hi: int = 256) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(lo, hi, shape, generator=g).to(torch.uint8)


def non_nan_fp8_codes(shape: tuple[int, ...], seed: int) -> torch.Tensor:
    codes = random_bytes(shape, seed)
    return torch.where((codes & 0x7F) == 0x7F, codes ^ 0x01, codes)  # NaN -> +-448


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("scale_container", ["uint8", "e8m0"])
def test_fp8_block_matches_transformers(dtype, scale_container):
    codes = non_nan_fp8_codes((384, 256), seed=1)
    scales = random_bytes((3, 2), seed=2, lo=100, hi=150)
    # every non-NaN code somewhere
    codes[0, :254] = torch.tensor([c for c in range(256) if c & 0x7F != 0x7F], dtype=torch.uint8)
    s = scales if scale_container == "uint8" else scales.view(torch.float8_e8m0fnu)
    expected = oracle(codes.view(torch.float8_e4m3fn), s, dtype)
    assert_tensors_equal(
        dequantize_fp8_block(codes, scales, dtype=dtype), expected, f"fp8 block {dtype}", signed_zeros=True
    )


def test_fp8_block_every_scale_byte_matches_transformers():
    codes = non_nan_fp8_codes((255 * 128, 128), seed=3)
    scales = torch.arange(255, dtype=torch.uint8).reshape(255, 1)
    expected = oracle(codes.view(torch.float8_e4m3fn), scales, torch.float32)
    assert_tensors_equal(dequantize_fp8_block(codes, scales), expected, "every scale byte", signed_zeros=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_mxfp4_matches_transformers(dtype):
    packed = random_bytes((64, 128), seed=4)  # [out, in/2] -> in = 256, 8 groups per row
    packed[0] = torch.arange(128, dtype=torch.uint8)
    packed[1] = torch.arange(128, 256, dtype=torch.uint8)  # every byte = every nibble pair
    scales = random_bytes((64, 8), seed=5, lo=90, hi=160)
    expected = oracle(packed.view(torch.int8), scales, dtype)
    assert_tensors_equal(
        dequantize_mxfp4(packed, scales, dtype=dtype), expected, f"mxfp4 {dtype}", signed_zeros=True
    )
