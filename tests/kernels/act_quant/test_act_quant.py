"""The fused FP8 activation quantization against its torch twins, bit for bit (interpreter on the
CPU, the real kernel on a GPU): codes, scales and values, incl. −0, NaN rows, inf, values at the
scale boundaries (amax = 448·2^k and one ulp either side), partial last blocks and M = 0."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from mxserve.formats import fake_quant_fp8_pow2
from mxserve.kernels.act_quant.triton import fake_quant_fp8_triton, quantize_fp8_block_triton
from mxserve.kernels.linear_fp8_block.reference import quantize_activation_fp8_block

DEV = "cuda" if torch.cuda.is_available() else "cpu"


def _hard_rows(k: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    rows = [torch.randn(k, generator=g) * 10.0 ** float(p) for p in (-6, -3, 0, 2, 5)]
    edge = torch.randn(k, generator=g)
    for j, v in enumerate((448.0, float(torch.nextafter(torch.tensor(448.0), torch.tensor(0.0))),
                           float(torch.nextafter(torch.tensor(448.0), torch.tensor(1e9))), 448.0 * 2.0**-20, 0.0)):
        r = edge.clone()
        r[:: max(1, k // 3)] = 0.0
        r[0] = v * (2.0 ** (j - 2))
        rows.append(r.clamp(-abs(r[0]) if r[0] else -1, abs(r[0]) if r[0] else 1))
    neg_zero = torch.zeros(k)
    neg_zero[::2] = -0.0
    rows.append(neg_zero)
    special = torch.randn(k, generator=g)
    special[1] = float("inf")
    rows.append(special)
    return torch.stack(rows)


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.dtype == torch.bfloat16:
        a, b = a.view(torch.int16), b.view(torch.int16)
    elif a.dtype == torch.float32:
        a, b = a.view(torch.int32), b.view(torch.int32)
    return bool(torch.equal(a, b))


@pytest.mark.parametrize("k", [128, 200, 384])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_values_and_codes_bit_identical(k, dtype):
    x = _hard_rows(k).to(dtype).to(DEV)
    got = fake_quant_fp8_triton(x)
    want = fake_quant_fp8_pow2(x, block=128)
    assert _same_bits(got, want)
    codes, scales = quantize_fp8_block_triton(x)
    ref_codes, ref_scales = quantize_activation_fp8_block(x)
    assert torch.equal(scales, ref_scales)
    assert torch.equal(codes, ref_codes)


def test_nan_row_and_empty():
    x = torch.randn(3, 256)
    x[1, 7] = float("nan")
    x = x.to(DEV)
    got, want = fake_quant_fp8_triton(x), fake_quant_fp8_pow2(x, block=128)
    assert torch.equal(torch.isnan(got), torch.isnan(want))
    assert torch.equal(torch.nan_to_num(got), torch.nan_to_num(want))
    _, scales = quantize_fp8_block_triton(x)
    assert torch.equal(scales, quantize_activation_fp8_block(x)[1])
    assert fake_quant_fp8_triton(x[:0]).shape == (0, 256)
    codes, scales = quantize_fp8_block_triton(x[:0])
    assert codes.shape == (0, 256) and scales.shape == (0, 2)


@pytest.mark.parametrize("block", [64, 128])
def test_three_dim_input_and_block(block):
    x = (torch.randn(2, 3, 192) * 3).bfloat16().to(DEV)
    assert _same_bits(fake_quant_fp8_triton(x, block), fake_quant_fp8_pow2(x, block=block))


def test_rejects_bad_input():
    with pytest.raises(ValueError, match="must be one of"):
        fake_quant_fp8_triton(torch.zeros(2, 128, dtype=torch.int32, device=DEV))
    with pytest.raises(ValueError, match="block must be"):
        fake_quant_fp8_triton(torch.zeros(2, 128, device=DEV), block=100)
    with pytest.raises(ValueError, match="x must be"):
        quantize_fp8_block_triton(torch.zeros(2, 3, 128, device=DEV))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gpu_large_random_bit_identical():
    x = torch.randn(2048, 4096, device="cuda") * torch.logspace(-4, 4, 2048, device="cuda")[:, None]
    assert _same_bits(fake_quant_fp8_triton(x), fake_quant_fp8_pow2(x, block=128))
    codes, scales = quantize_fp8_block_triton(x.bfloat16())
    ref_codes, ref_scales = quantize_activation_fp8_block(x.bfloat16())
    assert torch.equal(codes, ref_codes) and torch.equal(scales, ref_scales)
