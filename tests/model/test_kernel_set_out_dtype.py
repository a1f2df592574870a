"""The KernelSet linear / grouped_linear slots take `out_dtype` (the result rounded once, as the
callers' `.to(stream dtype)` did) on every implementation behind them: the reference twins and the
per-layer dispatcher's Triton kernels (under the interpreter on the CPU), bit for bit the cast."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")  # without a GPU tests/conftest.py sets TRITON_INTERPRET=1

from mxserve.formats import QuantizedWeight, WeightLayout
from mxserve.kernels.chooser import Choice, LinearDispatcher
from mxserve.model.kernel_selection import linear_dispatch_set
from mxserve.model.kernel_set import REFERENCE_KERNELS

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _fp8(n: int, k: int, seed: int) -> QuantizedWeight:
    w = torch.randn(n, k, generator=torch.Generator().manual_seed(seed)) * 0.05
    return QuantizedWeight.quantize(w, WeightLayout.FP8_BLOCK).to(DEVICE)


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int16) if t.element_size() == 2 else t.view(torch.int32)


@pytest.mark.parametrize("backend", ["reference", "triton"])
def test_linear_slots_round_like_the_cast(backend: str) -> None:
    weights = {"l.wq_b": _fp8(72, 300, 0), "l.wo_a": _fp8(256, 200, 1),
               "l.proj": torch.randn(40, 300, generator=torch.Generator().manual_seed(2)).bfloat16().to(DEVICE)}
    kernels = linear_dispatch_set(weights, {name: Choice(backend, "test") for name in weights})
    assert isinstance(kernels.linear, LinearDispatcher)
    x = torch.randn(3, 300, generator=torch.Generator().manual_seed(3)).to(DEVICE) * 10
    xg = torch.randn(3, 2, 200, generator=torch.Generator().manual_seed(4)).to(DEVICE).bfloat16()
    for ks in (kernels, REFERENCE_KERNELS):
        for name, qi in (("l.wq_b", True), ("l.wq_b", False), ("l.proj", False)):
            f32 = ks.linear(x, weights[name], quantize_input=qi)
            for dtype in (torch.bfloat16, torch.float16):
                got = ks.linear(x, weights[name], quantize_input=qi, out_dtype=dtype)
                assert got.dtype == dtype and torch.equal(_bits(got), _bits(f32.to(dtype))), (name, qi, dtype)
        g32 = ks.grouped_linear(xg, weights["l.wo_a"])
        got = ks.grouped_linear(xg, weights["l.wo_a"], out_dtype=torch.bfloat16)
        assert got.shape == g32.shape and torch.equal(_bits(got), _bits(g32.to(torch.bfloat16)))
    assert REFERENCE_KERNELS.linear(x, weights["l.wq_b"]).dtype == torch.float32  # None keeps fp32
