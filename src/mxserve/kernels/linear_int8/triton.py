"""Launcher of the INT8 W8A8 linear Triton kernel: validates, quantizes x per token, launches.

Decode (M <= 16) runs a 16-token tile with 64-feature weight slabs (many programs stream the
weight once); prefill a 128x128 tile. Integer accumulation is exact, so both give the twin's bits.
"""

from __future__ import annotations

import torch
import triton

from mxserve.kernels.linear_fp8_block.triton import interpreting
from mxserve.kernels.linear_int8._linear_int8_kernel import _linear_int8_kernel
from mxserve.kernels.linear_int8.reference import Int8Weight, check_int8_weight, quantize_activation_int8

_X_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def linear_int8_triton(x: torch.Tensor, weight: Int8Weight) -> torch.Tensor:
    """x [..., K] float · W[N, K]ᵀ → fp32 [..., N] (see `linear_int8_ref`)."""
    if x.dtype not in _X_DTYPES:
        raise ValueError(f"linear_int8: x must be one of {_X_DTYPES}, got {x.dtype=}")
    k = x.shape[-1]
    check_int8_weight(weight, k)
    n = weight.shape[0]
    if x.device != weight.codes.device:
        raise ValueError(f"linear_int8: {x.device=} but weight on {weight.codes.device}")
    if x.device.type != "cuda" and not interpreting():
        raise ValueError(f"linear_int8 triton backend needs a CUDA tensor or TRITON_INTERPRET=1, got {x.device=}")
    if weight.codes.stride() != (k, 1):
        raise ValueError(f"linear_int8: weight codes must be row-major contiguous, got {weight.codes.stride()=}")
    x2 = x.reshape(-1, k)
    m = x2.shape[0]
    out = torch.empty((m, n), dtype=torch.float32, device=x.device)
    if m and n:
        codes, xs = quantize_activation_int8(x2)
        # --- launch parameters ---------------------------------------------------------------
        if interpreting():
            block_n, block_m, block_k, warps, stages, dot = 32, 16, 64, 4, 1, False
        elif m <= 16:
            block_n, block_m, block_k, warps, stages, dot = 64, 16, 128, 4, 4, True
        else:
            block_n, block_m, block_k, warps, stages, dot = 128, 128, 128, 8, 3, True
        # ---------------------------------------------------------------------------------------
        grid = (triton.cdiv(n, block_n), triton.cdiv(m, block_m))
        _linear_int8_kernel[grid](codes, xs, weight.codes, weight.scales, out, m, n, k, codes.stride(0),
                                  weight.codes.stride(0), out.stride(0), BLOCK_M=block_m, BLOCK_N=block_n,
                                  BLOCK_K=block_k, DOT=dot, num_warps=warps, num_stages=stages)
    return out.reshape(*x.shape[:-1], n)
