"""Launcher of the BF16-weight linear: the block-dot kernel of `linear_fp8_block` with W_KIND 2.

Same structure as the FP8 launch (decode: 16-token tile, 64-row weight slabs, fixed split-K
grid whose partials the tile's last-arriving program sums in split order — the FP8 launch's fused
sum — or, in prefill, a second in-order sum launch; prefill: 128x128 tiles), so a row's bits do
not depend on M.
x goes in as bf16 (one dot) or, for fp32/fp16 x, as bf16 hi + lo (two dots, ~16 bits of x).
Fixed launch parameters (no autotuning yet: measured in docs/benchmarks.md).
"""

from __future__ import annotations

import torch
import triton

from mxserve.kernels.linear_bf16 import check_bf16_weight
from mxserve.kernels.linear_fp8_block._linear_fp8_block_kernel import _blockdot_kernel, _sum_groups_kernel
from mxserve.kernels.linear_fp8_block.triton import (
    _FEW_PROGRAMS,
    _MIN_BLOCK_N,
    _SPLIT_ROTATE,
    _split_sum,
    decode_max_m,
    interpreting,
    kb_per_group,
    split_counters,
)

_X_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def linear_bf16_triton(x: torch.Tensor, weight: torch.Tensor, *, out_dtype: torch.dtype | None = None
                       ) -> torch.Tensor:
    """x [..., K] · W[N, K]ᵀ → fp32 [..., N] for a bf16 weight; `out_dtype` (bf16/fp16) is rounded to
    nearest even by the launch's final store (the block-dot kernel's epilogue): `.to(out_dtype)`'s bits."""
    weight = check_bf16_weight(weight)
    if out_dtype not in (None, *_X_DTYPES):
        raise ValueError(f"linear_bf16: out_dtype must be None or one of {_X_DTYPES}, got {out_dtype=}")
    n, k = weight.shape
    if x.dtype not in _X_DTYPES or x.shape[-1] != k:
        raise ValueError(f"linear_bf16: x must be [..., {k}] in {_X_DTYPES}, got {tuple(x.shape)=} {x.dtype=}")
    if x.device != weight.device:
        raise ValueError(f"linear_bf16: {x.device=} but {weight.device=}")
    if x.device.type != "cuda" and not interpreting():
        raise ValueError(f"linear_bf16 triton backend needs a CUDA tensor or TRITON_INTERPRET=1, got {x.device=}")
    if weight.stride() != (k, 1):
        raise ValueError(f"linear_bf16: weight must be row-major contiguous, got {weight.stride()=}")
    lead = x.shape[:-1]
    x2 = x.reshape(-1, k)
    if x2.stride(1) != 1:
        x2 = x2.contiguous()
    m = x2.shape[0]
    out = torch.empty((m, n), dtype=out_dtype or torch.float32, device=x.device)
    if m == 0 or n == 0:
        return out.reshape(*lead, n)

    # --- launch parameters -------------------------------------------------------------------------
    group = kb_per_group(n, k)
    num_groups = triton.cdiv(triton.cdiv(k, 128), group)
    is_decode = m <= decode_max_m(n, k)  # the FP8 launch's rule and switch (MXSERVE_LINEAR_DECODE_MAX_M)
    if interpreting():
        block_n, block_m, warps, stages = 64, 16 if is_decode else 32, 4, 1
    elif is_decode:
        block_n, block_m, warps, stages = 64, 16, 4, 4
    else:
        # fp32 x doubles the activation tile: 3 stages of (128x128 fp32 x + 128x128 bf16 w) need 288 KB of
        # shared memory, over the H200's 227 KB (seen on the GPU); 2 stages fit
        block_n, block_m, warps, stages = 128, 128, 8, 3 if x2.dtype != torch.float32 else 2
    split = num_groups > 1 and (is_decode or triton.cdiv(n, 128) * triton.cdiv(m, 128) < _FEW_PROGRAMS)
    consts = dict(X_MODE=2, X_PIECES=1 if x2.dtype == torch.bfloat16 else 2, DOT=0 if interpreting() else 1, W_KIND=2)
    # decode: the last-arriving program of each output tile sums the split partials in split order
    # (the FP8 launch's fused sum: the same additions as the second launch, so the same bits; one
    # launch fewer per call: 22 per default-model decode token, H200 profile, session 5)
    fuse = split and is_decode and _split_sum["default"] != "two_launch"  # set_split_sum: the off switch
    counters = split_counters(x.device, triton.cdiv(m, 16) * triton.cdiv(n, _MIN_BLOCK_N)) if fuse else None
    # ---------------------------------------------------------------------------------------------

    dest = torch.empty((num_groups, m, n), dtype=torch.float32, device=x.device) if split else out
    x3 = x2.unsqueeze(1)
    grid = (triton.cdiv(n, block_n), triton.cdiv(m, block_m), num_groups if split else 1)
    fused = {} if counters is None else dict(sum_ptr=out, cnt_ptr=counters, FUSED_SUM=True,
                                             SPLIT_ROTATE=_SPLIT_ROTATE["value"])
    _blockdot_kernel[grid](
        x3, out, weight, weight, weight, dest, m, n, k,
        x3.stride(0), 0, 0, 0, weight.stride(0), 0, dest.stride(0) if split else 0, n, num_groups if split else 1, 0,
        KB_PER_GROUP=group, NUM_GROUPS=num_groups, SPLIT=split, BLOCK_M=block_m, BLOCK_N=block_n,
        num_warps=warps, num_stages=stages, **consts, **fused,
    )
    if split and counters is None:
        block = 1024
        _sum_groups_kernel[(triton.cdiv(m * n, block),)](dest, out, m * n, dest.stride(0), NUM_GROUPS=num_groups,
                                                         BLOCK=block)
    return out.reshape(*lead, n)
