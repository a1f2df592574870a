"""The shared expert's one-launch SwiGLU (`shared_swiglu`) against the torch ops it replaces
(`shared_swiglu_torch`: two clamps, silu, product, cast).

GPU (marked gpu): bit for bit, bf16 and fp32 hidden, 1M random values at several scales, every
bf16 bit pattern as a gate (subnormals included), and the edges (±limit, beyond it, large negative
gates whose exp overflows, ±0, ±inf, NaN). CPU, under
the interpreter: the kernel's exp and division are numpy's, while torch's CPU silu is a vectorised
Sleef routine of its own rounding (1-2 fp32 ulp apart on ~15% of values; CUDA torch computes
x / (1 + expf(−x)) as the kernel does), so the check is exact for the clamps, NaN, infinities and
signs, within 4 fp32 ulp, and within one bf16 ulp after the cast."""

from __future__ import annotations

import os

import pytest
import torch

from mxserve.kernels.moe.shared import shared_swiglu, shared_swiglu_torch, use_fused_swiglu

pytest.importorskip("triton")
LIMIT = 10.0


def _inputs(n: int, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    scale = torch.tensor([1e-3, 1.0, 4.0, 30.0]).repeat_interleave(n // 4)
    gate, up = torch.randn(n, generator=g) * scale, torch.randn(n, generator=g) * scale
    edges = torch.tensor([LIMIT, -LIMIT, LIMIT + 1, -LIMIT - 1, -90.0, -200.0, 0.0, -0.0, float("inf"), float("-inf"),
                          float("nan"), 1e-30, -1e-30, 88.0])
    gate[: edges.numel()] = edges
    up[: edges.numel()] = edges.flip(0)
    return gate.view(-1, 64).to(device), up.view(-1, 64).to(device)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("hidden_dtype", [torch.bfloat16, torch.float32])
def test_gpu_bitwise(hidden_dtype):
    gate, up = _inputs(1 << 20, "cuda")
    # every bf16 value as a gate (subnormals, ±inf and NaNs included), against random up values
    every_bf16 = torch.arange(-(1 << 15), 1 << 15, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)
    gate[: 1 << 10] = every_bf16.float().view(1 << 10, 64).cuda()
    assert use_fused_swiglu(gate)
    got, want = shared_swiglu(gate, up, LIMIT, hidden_dtype), shared_swiglu_torch(gate, up, LIMIT, hidden_dtype)
    same = (got.view(torch.int16 if hidden_dtype == torch.bfloat16 else torch.int32)
            == want.view(torch.int16 if hidden_dtype == torch.bfloat16 else torch.int32)) | (got.isnan() & want.isnan())
    bad = (~same).nonzero()
    assert bad.numel() == 0, (f"{bad.shape[0]} differ; first at {bad[0].tolist()}: gate {gate[tuple(bad[0])].item()!r} "
                              f"up {up[tuple(bad[0])].item()!r}: {got[tuple(bad[0])].item()!r} vs "
                              f"{want[tuple(bad[0])].item()!r}")


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="needs the Triton interpreter")
@pytest.mark.parametrize("hidden_dtype", [torch.bfloat16, torch.float32])
def test_interpreter_matches_the_torch_ops(hidden_dtype, monkeypatch):
    gate, up = _inputs(1 << 12, "cpu")
    monkeypatch.setenv("MXSERVE_TRITON_SHARED_SWIGLU", "1")
    assert use_fused_swiglu(gate)
    got, want = shared_swiglu(gate, up, LIMIT, hidden_dtype), shared_swiglu_torch(gate, up, LIMIT, hidden_dtype)
    assert got.dtype == want.dtype == hidden_dtype and got.shape == want.shape
    assert torch.equal(got.isnan(), want.isnan()) and torch.equal(got.isinf(), want.isinf())
    fin = want.isfinite()
    ulps = 4 if hidden_dtype == torch.float32 else 1
    ulp = torch.finfo(hidden_dtype).eps * want[fin].float().abs().clamp(min=torch.finfo(hidden_dtype).tiny)
    assert ((got[fin].float() - want[fin].float()).abs() <= ulps * ulp).all()
    assert torch.equal(got[fin].float().sign(), want[fin].float().sign())
    assert (got[fin] == want[fin]).float().mean() > 0.8
    monkeypatch.setenv("MXSERVE_TORCH_SHARED_SWIGLU", "1")
    assert not use_fused_swiglu(gate)


def test_refuses_bad_inputs():
    g = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="g and u must be fp32"):
        shared_swiglu(g, g.bfloat16(), LIMIT, torch.bfloat16)
    with pytest.raises(ValueError, match="hidden_dtype must be fp32 or bf16"):
        shared_swiglu(g, g, LIMIT, torch.float16)
