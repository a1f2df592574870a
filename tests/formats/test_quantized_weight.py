"""QuantizedWeight: validation messages, constructors, dequantize, nbytes, to(device)."""

from __future__ import annotations

import pytest
import torch

from mxserve.formats import (
    E2M1,
    E4M3FN,
    QuantizedWeight,
    WeightLayout,
    assert_tensors_equal,
    dequantize_fp8_block,
    dequantize_mxfp4,
    quantize_fp8_block,
    quantize_mxfp4,
)

from .test_block_fp8 import random_weights


def test_fp8_block_from_checkpoint_dtypes():
    w = random_weights((300, 200), seed=0, spread=3)
    codes, scales = quantize_fp8_block(w)
    q = QuantizedWeight.from_fp8_block(codes.view(torch.float8_e4m3fn), scales.view(torch.float8_e8m0fnu))
    assert q.codes.dtype == torch.uint8 and q.scales.dtype == torch.uint8
    assert q.shape == (300, 200) and q.layout is WeightLayout.FP8_BLOCK and q.fmt is E4M3FN
    assert q.nbytes == 300 * 200 + 3 * 2
    assert_tensors_equal(q.dequantize(), dequantize_fp8_block(codes, scales), "dequantize")
    assert q.dequantize(torch.bfloat16).dtype == torch.bfloat16
    assert q.to("cpu") is q


def test_mxfp4_from_checkpoint_dtypes_odd_width():
    w = random_weights((7, 45), seed=1, spread=3)
    packed, scales = quantize_mxfp4(w)
    q = QuantizedWeight.from_mxfp4(packed.view(torch.int8), scales, num_cols=45)
    assert q.shape == (7, 45) and q.block == (1, 32) and q.fmt is E2M1 and q.layout is WeightLayout.MXFP4
    assert q.nbytes == 7 * 23 + 7 * 2
    assert_tensors_equal(q.dequantize(), dequantize_mxfp4(packed, scales, num_cols=45), "dequantize")


@pytest.mark.parametrize("layout", list(WeightLayout))
def test_quantize_constructor(layout):
    w = random_weights((2, 130, 70), seed=2, spread=2)
    q = QuantizedWeight.quantize(w, layout)
    assert q.shape == (2, 130, 70)
    if layout is WeightLayout.FP8_BLOCK:
        codes, scales = quantize_fp8_block(w)
        assert q.scales.shape == (2, 2, 1)
    else:
        codes, scales = quantize_mxfp4(w)
        assert q.codes.shape == (2, 130, 35) and q.scales.shape == (2, 130, 3)
    assert_tensors_equal(q.codes, codes, "codes")
    assert_tensors_equal(q.scales, scales, "scales")
    assert q.dequantize().shape == (2, 130, 70)


def test_validation_messages_show_values():
    codes = torch.zeros(256, 256, dtype=torch.uint8)
    scales = torch.zeros(2, 2, dtype=torch.uint8)
    with pytest.raises(ValueError, match=r"codes.dtype=torch.float32"):
        QuantizedWeight(codes.float(), scales, E4M3FN, (128, 128), (256, 256), WeightLayout.FP8_BLOCK)
    with pytest.raises(ValueError, match=r"expected \(2, 2\)"):
        QuantizedWeight(codes, scales[:1], E4M3FN, (128, 128), (256, 256), WeightLayout.FP8_BLOCK)
    with pytest.raises(ValueError, match=r"logical self.shape=\(256, 255\)"):
        QuantizedWeight(codes, scales, E4M3FN, (128, 128), (256, 255), WeightLayout.FP8_BLOCK)
    with pytest.raises(ValueError, match="fmt=e2m1"):
        QuantizedWeight(codes, scales, E4M3FN, (1, 32), (256, 512), WeightLayout.MXFP4)
    with pytest.raises(ValueError, match="num_cols=513"):
        QuantizedWeight.from_mxfp4(codes, torch.zeros(256, 16, dtype=torch.uint8), num_cols=513)
