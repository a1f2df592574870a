"""Private Triton code of the CUDA-core GEMV for block-scaled FP8 weights (opt-in fast decode).

No tensor cores: each program streams one BLOCK_N x (KB_PER_GROUP·128) weight slab exactly once
(128 contiguous bytes per row: 16-byte loads), widens the codes to fp32 in the load layout (no
operand-layout shuffle), and for each of the few activation rows reduces w·x over the block's
128 channels with fp32 FMAs; the 128x128 block scale multiplies that per-block partial sum once.
K is split over a fixed grid (KB_PER_GROUP from N and K only) and `_sum_groups_kernel` adds the
partials in group order, so rows are bit-identical for any M this kernel runs (1..4).

Why opt-in: its within-block summation order (a register-and-shuffle tree) differs from the
MMA's, so a row computed here and the same row computed by the tensor-core path of a larger
batch differ in the last bits. The default path keeps one arithmetic for every M.
"""

from __future__ import annotations

import triton
import triton.language as tl

from mxserve.kernels.linear_fp8_block._linear_fp8_block_kernel import _ue8m0_to_fp32


@triton.jit(do_not_specialize=['M', 'stride_os', 'KB_PER_GROUP'])  # run-time sizes: one compile for every value
def _gemv_fma_kernel(
    x_ptr, w_ptr, ws_ptr, lut_ptr, out_ptr,
    M, N, K,
    stride_xm, stride_wn, stride_wsn, stride_os, stride_om,
    KB_PER_GROUP,  # runtime: no recompile per layer shape
    BLOCK_M: tl.constexpr,  # rows held (1, 2 or 4); rows >= M are masked
    BLOCK_N: tl.constexpr,  # divides 128: one weight-scale row per program
    W_LUT: tl.constexpr,  # widen through the 256-entry fp32 value table (e4m3fnuz)
):
    pid_n = tl.program_id(0)
    split = tl.program_id(1)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_mask = offs_n < N
    cols = tl.arange(0, BLOCK_M)
    scale_row = ws_ptr + ((pid_n * BLOCK_N) // 128) * stride_wsn
    num_kb = tl.cdiv(K, 128)
    acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    for j in range(KB_PER_GROUP):
        kb = split * KB_PER_GROUP + j
        offs_k = kb * 128 + tl.arange(0, 128)
        k_mask = offs_k < K
        w = tl.load(w_ptr + offs_n[:, None] * stride_wn + offs_k[None, :], mask=n_mask[:, None] & k_mask[None, :],
                    other=0)
        if W_LUT:
            wf = tl.load(lut_ptr + w.to(tl.int32))
        else:
            wf = w.to(tl.float8e4nv, bitcast=True).to(tl.float32)
        s = _ue8m0_to_fp32(tl.load(scale_row + kb, mask=kb < num_kb, other=127))
        for mi in tl.static_range(BLOCK_M):
            row_ok = offs_k * 0 + mi < M  # (a tensor: the interpreter rejects a scalar bool in a mask)
            xm = tl.load(x_ptr + mi * stride_xm + offs_k, mask=k_mask & row_ok, other=0.0).to(tl.float32)
            part = tl.sum(wf * xm[None, :], axis=1) * s  # [BLOCK_N]
            acc += tl.where(cols[None, :] == mi, part[:, None], 0.0)
    out = out_ptr + split * stride_os + cols[None, :] * stride_om + offs_n[:, None]
    tl.store(out, acc, mask=n_mask[:, None] & (cols[None, :] < M))
