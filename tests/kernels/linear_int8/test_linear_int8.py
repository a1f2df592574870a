"""linear_int8: the Triton kernel (interpreted on the CPU) equals its torch twin bit for bit.

Integer accumulation is exact on both sides and the epilogue multiplies in the same order, so
the comparison is `torch.equal`, at every M (batch invariance follows)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from mxserve.kernels import linear_int8
from mxserve.kernels.linear_int8 import Int8Weight, quantize_activation_int8, quantize_weight_int8

CPU = not torch.cuda.is_available()
DEVICE = "cpu" if CPU else "cuda"


@pytest.mark.parametrize("n,k", [(48, 64), (70, 200)])
@pytest.mark.parametrize("m", [0, 1, 5, 33])
def test_bitwise_parity_with_twin(n: int, k: int, m: int) -> None:
    g = torch.Generator().manual_seed(n * k + m)
    w = quantize_weight_int8(torch.randn(n, k, generator=g)).to(DEVICE)
    x = torch.randn(m, k, generator=g).to(DEVICE)
    out = linear_int8(x, w, backend="triton")
    ref = linear_int8(x, w, backend="reference")
    assert out.shape == ref.shape == (m, n) and out.dtype == torch.float32
    assert torch.equal(out, ref)
    if m:  # and it is a linear: close to the float product (quantization error ~1%)
        exact = x.double() @ w.dequantize().double().t()
        assert float((out.double() - exact).norm() / exact.norm()) < 0.02


def test_quantization_contract() -> None:
    x = torch.tensor([[0.0, 0.0], [1.0, -2.0], [254.0, 1.0]])
    codes, scales = quantize_activation_int8(x)
    assert torch.equal(scales, torch.tensor([1.0, 2.0 / 127, 2.0]))
    assert torch.equal(codes, torch.tensor([[0, 0], [64, -127], [127, 0]], dtype=torch.int8))  # 63.5 → 64 (even)


def test_batch_invariance_and_validation() -> None:
    w = quantize_weight_int8(torch.randn(40, 130)).to(DEVICE)
    x = torch.randn(20, 130, device=DEVICE)
    full = linear_int8(x, w, backend="triton")
    assert torch.equal(linear_int8(x[:3], w, backend="triton"), full[:3])
    with pytest.raises(ValueError, match="130"):
        linear_int8(torch.randn(2, 100, device=DEVICE), w, backend="triton")
    with pytest.raises(TypeError, match="Int8Weight"):
        linear_int8(x, torch.randn(40, 130), backend="triton")
    with pytest.raises(ValueError, match="int8 codes"):
        linear_int8(x, Int8Weight(w.codes.float(), w.scales), backend="triton")


@pytest.mark.gpu
@pytest.mark.skipif(CPU, reason="needs CUDA")
@pytest.mark.parametrize("n,k,m", [(4096, 4096, 1), (4096, 4096, 16), (1536, 4096, 257)])
def test_gpu_bitwise(n: int, k: int, m: int) -> None:
    w = quantize_weight_int8(torch.randn(n, k, device="cuda"))
    x = torch.randn(m, k, device="cuda")
    assert torch.equal(linear_int8(x, w, backend="triton"), linear_int8(x, w, backend="reference"))
