"""The one-launch Triton RMS norm equals its torch twin bit for bit (interpreter): bf16 and fp32
rows, D not a multiple of the block and longer than one block, 0 / 1 / 5 rows, 3-d input, rows
of very different scale; a row alone equals the same row in a batch."""

from __future__ import annotations

import os

import pytest
import torch

from mxserve.kernels.rms_norm import rms_norm
from mxserve.kernels.rms_norm.triton import rms_norm_triton

needs_interpreter = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="needs the Triton interpreter")


def _rows(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g) * torch.logspace(-3, 3, shape[0])[(...,) + (None,) * (len(shape) - 1)]
    return x.to(dtype)


@needs_interpreter
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("shape", [(5, 1500), (1, 64), (0, 96), (3, 2, 100)])
def test_bit_identical_to_the_twin(dtype, shape):
    x = _rows(shape, dtype, seed=len(shape))
    w = (torch.rand(shape[-1], generator=torch.Generator().manual_seed(1)) + 0.5).to(dtype)
    got, want = rms_norm_triton(x, w, 1e-6), rms_norm(x, w, 1e-6)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert torch.equal(got, want), f"max |d| {(got.float() - want.float()).abs().max().item()}"


@needs_interpreter
def test_batch_invariance():
    x = _rows((6, 1030), torch.bfloat16, seed=3)
    w = torch.ones(1030, dtype=torch.bfloat16)
    batch = rms_norm_triton(x, w, 1e-6)
    for i in (0, 5):
        assert torch.equal(rms_norm_triton(x[i:i + 1], w, 1e-6)[0], batch[i])


@needs_interpreter
def test_refuses_bad_arguments():
    with pytest.raises(ValueError, match="weight must be"):
        rms_norm_triton(torch.zeros(2, 8), torch.ones(7), 1e-6)
    with pytest.raises(ValueError, match="bf16/fp32 tensor"):
        rms_norm_triton(torch.zeros(2, 8, dtype=torch.int32), torch.ones(8), 1e-6)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gpu_bit_identical_at_model_shapes():
    """CUDA: libdevice rsqrt and the fp64 sum against torch's CUDA twin, Flash (4096) and the
    default model's width, bf16 and fp32, 1 and 64 rows."""
    for dim in (4096, 1536, 256):
        for rows in (1, 64):
            for dtype in (torch.bfloat16, torch.float32):
                x = _rows((rows, dim), dtype, seed=dim + rows).cuda()
                w = (torch.rand(dim, device="cuda") + 0.5).to(dtype)
                got, want = rms_norm_triton(x, w, 1e-6), rms_norm(x, w, 1e-6)
                assert torch.equal(got, want), (dim, rows, dtype, (got.float() - want.float()).abs().max().item())
