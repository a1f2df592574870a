"""grouped_linear (wo_a): the public op's backends agree (Triton interpreted on the CPU)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from mxserve.formats import QuantizedWeight, WeightLayout
from mxserve.kernels import grouped_linear

CPU = not torch.cuda.is_available()
DEVICE = "cpu" if CPU else "cuda"


@pytest.mark.parametrize("t", [0, 1, 6])
def test_triton_matches_reference(t: int) -> None:
    g, r, k = 2, 256, 200
    w = QuantizedWeight.quantize(torch.randn(g * r, k) * 0.05, WeightLayout.FP8_BLOCK).to(DEVICE)
    x = torch.randn(t, g, k, device=DEVICE).bfloat16()
    out = grouped_linear(x, w, backend="triton")
    ref = grouped_linear(x, w, backend="reference")
    assert out.shape == ref.shape == (t, g, r)
    if t:
        err = float((out.double() - ref.double()).norm() / ref.double().norm())
        assert err <= 1e-6, f"{err=:.3e}"
    with pytest.raises(ValueError, match="unknown backend"):
        grouped_linear(x, w, backend="cuda")


@pytest.mark.gpu
@pytest.mark.skipif(CPU, reason="needs CUDA")
def test_gpu_wo_a_shape() -> None:
    w = QuantizedWeight.quantize(torch.randn(8 * 1024, 4096, device="cuda") * 0.02, WeightLayout.FP8_BLOCK)
    x = torch.randn(64, 8, 4096, device="cuda").bfloat16()
    full = grouped_linear(x, w, backend="triton")
    ref = grouped_linear(x, w, backend="reference")
    assert float((full.double() - ref.double()).norm() / ref.double().norm()) <= 1e-6
    assert torch.equal(grouped_linear(x[:1], w, backend="triton"), full[:1])
