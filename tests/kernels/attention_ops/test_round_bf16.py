"""The kernels' shared fp32 → bf16 rounding (`round_bf16`, and the MoE kernels' `_round_bf16`)
against torch's `.to(torch.bfloat16)`: every finite edge rounds the same, and every NaN stays a
NaN. The GPU's own NaN is 0x7FFFFFFF; before the fix the rounding add carried it into -0.0 (found
by the shared SwiGLU's H200 bit test, session 6 call 4), which hid faults from finiteness checks."""

from __future__ import annotations

import pytest
import torch

triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402

from mxserve.kernels.attention_ops._cache_jit import round_bf16  # noqa: E402
from mxserve.kernels.moe._experts_kernel import _round_bf16  # noqa: E402


@triton.jit
def _round_kernel(x_ptr, out_ptr, moe_out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    live = offs < n
    x = tl.load(x_ptr + offs, mask=live, other=0.0)
    tl.store(out_ptr + offs, round_bf16(x), mask=live)
    tl.store(moe_out_ptr + offs, _round_bf16(x), mask=live)


BITS = [0x7FFFFFFF, 0xFFFFFFFF, 0x7FC00000, 0xFFC00000, 0x7F800001, 0x7F80FFFF,  # NaNs (GPU, quiet, payloads)
        0x7F800000, 0xFF800000, 0x7F7FFFFF, 0x3F808000, 0x3F818000, 0x3F807FFF, 0x00000001, 0x80000000, 0]


def test_round_bf16_matches_torch_and_keeps_nans():
    device = "cuda" if torch.cuda.is_available() else "cpu"
    x = torch.tensor(BITS, dtype=torch.int64).to(torch.int32).view(torch.float32).to(device)
    out, moe_out = torch.empty_like(x), torch.empty_like(x)
    _round_kernel[(1,)](x, out, moe_out, x.numel(), BLOCK=16)
    want = x.to(torch.bfloat16).float()
    for got in (out, moe_out):
        assert torch.equal(got.isnan(), x.isnan()), f"NaN lost or made: {got.tolist()}"
        finite = ~x.isnan()
        assert torch.equal(got[finite].view(torch.int32), want[finite].view(torch.int32)), got.tolist()
