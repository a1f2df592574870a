"""linear_bf16: the Triton kernel (interpreted on the CPU) against its torch twin.

Tolerance: under the interpreter each 128-K block is an fp32 product-sum of exact products
(bf16 x bf16 or bf16 x (hi + lo) pieces of fp32 x, ~16 bits) → normwise 2e-5 for fp32 x, 1e-6
for bf16 x. Rows are bit-identical across M."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from mxserve.kernels import linear_bf16

CPU = not torch.cuda.is_available()
DEVICE = "cpu" if CPU else "cuda"


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.double() - ref.double()).norm() / ref.double().norm().clamp(min=1e-300))


@pytest.mark.parametrize("n,k", [(64, 128), (100, 300)])
@pytest.mark.parametrize("m", [0, 1, 20])
@pytest.mark.parametrize("x_dtype,tol", [(torch.bfloat16, 1e-6), (torch.float32, 2e-5)])
def test_parity_with_twin(n: int, k: int, m: int, x_dtype: torch.dtype, tol: float) -> None:
    g = torch.Generator().manual_seed(n + k + m)
    w = torch.randn(n, k, generator=g).bfloat16().to(DEVICE)
    x = torch.randn(m, k, generator=g).to(x_dtype).to(DEVICE)
    out = linear_bf16(x, w, backend="triton")
    ref = linear_bf16(x, w, backend="reference")
    assert out.shape == ref.shape == (m, n) and out.dtype == torch.float32
    if m:
        assert rel_err(out, ref) <= tol, f"{rel_err(out, ref)=:.3e}"


def test_batch_invariance_and_validation() -> None:
    w = torch.randn(72, 700).bfloat16().to(DEVICE)  # 6 K blocks: several groups, split-K at decode
    x = torch.randn(24, 700, device=DEVICE)
    full = linear_bf16(x, w, backend="triton")
    for m in (1, 5):
        assert torch.equal(linear_bf16(x[:m], w, backend="triton"), full[:m])
    with pytest.raises(ValueError, match="bfloat16"):
        linear_bf16(x, w.float(), backend="triton")
    with pytest.raises(ValueError, match="700"):
        linear_bf16(torch.randn(2, 3, device=DEVICE), w, backend="triton")


@pytest.mark.gpu
@pytest.mark.skipif(CPU, reason="needs CUDA")
def test_gpu_parity_and_invariance() -> None:
    """GPU tolerances: bf16 x exact products and fp32 MMA sums 1e-6; fp32 x as bf16 hi + lo 2e-5."""
    w = torch.randn(4096, 4096, device="cuda").bfloat16()
    x = torch.randn(257, 4096, device="cuda")
    for xin, tol in ((x.bfloat16(), 1e-6), (x, 2e-5)):
        full = linear_bf16(xin, w, backend="triton")
        assert rel_err(full, linear_bf16(xin, w, backend="reference")) <= tol
        for m in (1, 7, 64):
            assert torch.equal(linear_bf16(xin[:m], w, backend="triton"), full[:m]), f"M={m} {xin.dtype}"


@pytest.mark.parametrize("x_dtype", [torch.bfloat16, torch.float32])
def test_fused_split_sum_equals_two_launch_bitwise(x_dtype: torch.dtype) -> None:
    """Decode: the tile's last-arriving program sums the split partials (one launch); the bits equal
    the two-launch sum, also when split 0 rather than the last split arrives last, and the arrival
    counters are back at 0 after every call (72 features, 700 channels: 6 splits)."""
    from mxserve.kernels.linear_fp8_block import triton as fp8_launcher

    w = torch.randn(72, 700, generator=torch.Generator().manual_seed(1)).bfloat16().to(DEVICE)
    x = torch.randn(5, 700, generator=torch.Generator().manual_seed(2)).to(x_dtype).to(DEVICE)
    fp8_launcher.set_split_sum("two_launch")
    try:
        twin = linear_bf16(x, w, backend="triton")
    finally:
        fp8_launcher.set_split_sum("auto")
    for rotate in (0, 1):
        fp8_launcher._SPLIT_ROTATE["value"] = rotate
        try:
            fused = linear_bf16(x, w, backend="triton")
        finally:
            fp8_launcher._SPLIT_ROTATE["value"] = 0
        assert torch.equal(fused, twin), f"rotate={rotate}: max |Δ| {float((fused - twin).abs().max()):.3e}"
        assert bool((fp8_launcher.split_counters(torch.device(DEVICE), 0) == 0).all())
