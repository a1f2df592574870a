"""The opt-in fast prefill tile (`tile="prefill_fast"`) against the torch twin.

Tolerances as in test_linear_fp8_block.py: normwise relative error <= 1e-6 under the interpreter
(fp32 product-sums of exact values), on a GPU weight-only (bf16 x: exact products, fp32 MMA
sums; 1e-5 on the H200, see the GPU test) and 5e-4 W8A8 (the FP8 MMA sums with fewer bits than fp32 inside a 128-K block). Rows must
not depend on M within this tile; they are NOT required to equal the default tile's bits.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from tests.kernels.linear_fp8_block.test_linear_fp8_block import CPU, DEVICE, first_mismatch, rel_err, weight

from mxserve.formats import E4M3FNUZ, QuantizedWeight, fp8_ocp_to_fnuz
from mxserve.kernels.linear_fp8_block import linear_fp8_block_ref
from mxserve.kernels.linear_fp8_block.triton import linear_fp8_block_triton


@pytest.mark.parametrize("n,k", [(64, 128), (200, 300), (130, 700)])
@pytest.mark.parametrize("quantize_input", [False, True])
def test_parity_and_rows_independent_of_m(n: int, k: int, quantize_input: bool) -> None:
    """N, K not multiples of the tile; M = 1 and 17 rows equal the same rows of M = 40 bit for bit."""
    w = weight(n, k, seed=n + k)
    x = torch.randn(40, k, generator=torch.Generator().manual_seed(k)).to(DEVICE)
    xin = x if quantize_input else x.bfloat16()
    full = linear_fp8_block_triton(xin, w, quantize_input=quantize_input, tile="prefill_fast")
    ref = linear_fp8_block_ref(xin, w, quantize_input=quantize_input)
    assert full.shape == ref.shape == (40, n) and full.dtype == torch.float32
    assert not torch.isnan(full).any()
    assert rel_err(full, ref) <= 1e-6, f"{rel_err(full, ref)=:.3e} ({n=}, {k=})"
    for m in (1, 17):
        part = linear_fp8_block_triton(xin[:m], w, quantize_input=quantize_input, tile="prefill_fast")
        assert torch.equal(part, full[:m]), f"M={m}: {first_mismatch(part, full[:m])}"


def test_empty_leading_dims_and_validation() -> None:
    w = weight(96, 260)
    assert linear_fp8_block_triton(torch.zeros(0, 260, device=DEVICE).bfloat16(), w, tile="prefill_fast").shape == (0, 96)
    x = torch.randn(2, 3, 260, device=DEVICE).bfloat16()
    out = linear_fp8_block_triton(x, w, tile="prefill_fast")
    assert out.shape == (2, 3, 96) and rel_err(out, linear_fp8_block_ref(x, w)) <= 1e-6
    with pytest.raises(ValueError, match="bf16 x"):
        linear_fp8_block_triton(torch.randn(2, 260, device=DEVICE), w, tile="prefill_fast")  # fp32 x weight-only
    codes, scales = fp8_ocp_to_fnuz(w.codes, w.scales)
    fnuz = QuantizedWeight.from_fp8_block(codes, scales, fmt=E4M3FNUZ)
    with pytest.raises(ValueError, match="e4m3fn weights"):
        linear_fp8_block_triton(x, fnuz, tile="prefill_fast")


@pytest.mark.gpu
@pytest.mark.skipif(CPU, reason="needs CUDA")
@pytest.mark.parametrize("n,k", [(1536, 4096), (4096, 8192)])
def test_gpu_parity_and_invariance(n: int, k: int) -> None:
    w = weight(n, k, seed=12, device="cuda")
    x = torch.randn(2048, k, device="cuda")
    # weight-only: one fp32 accumulator over all of K on the bf16 tensor cores (no per-128-K promotion
    # as in the default tile): measured 1.5e-6 (K 4096) and 3.7e-6 (K 8192) on the H200, 2026-12-01
    for xin, q, tol in ((x.bfloat16(), False, 1e-5), (x, True, 5e-4)):
        full = linear_fp8_block_triton(xin, w, quantize_input=q, tile="prefill_fast")
        err = rel_err(full, linear_fp8_block_ref(xin, w, quantize_input=q))
        assert err <= tol, f"{err=:.3e} {q=}"
        for m in (1, 7, 257):
            part = linear_fp8_block_triton(xin[:m], w, quantize_input=q, tile="prefill_fast")
            assert torch.equal(part, full[:m]), f"M={m} {q=}: {first_mismatch(part, full[:m])}"
