"""Private Triton code of the opt-in fast prefill tile of the block-scaled FP8 linear
(`tile="prefill_fast"`); launched only through `triton.py`.

A plain Hopper GEMM, one program per output tile, K walked in order in BLOCK_K steps by a
software-pipelined loop (num_stages cp.async stages), programs ordered in GROUP_M-tall columns
of tiles so that a wave of programs shares its weight tiles (and the small activation matrix) in
L2. Weight-only computes the transposed tile ("swap AB"): acc[BLOCK_N, BLOCK_M] = W[n-tile, :] ·
X[m-tile, :]ᵀ, so the widened weight tile is the wgmma's register operand (no shared-memory round
trip for it); W8A8 computes acc[BLOCK_M, BLOCK_N] with both FP8 operands read by the wgmma from
shared memory (the activation scales are per token: 2 per thread in this orientation). BLOCK_N
divides 128, so a tile has ONE weight scale per 128-K block (a scalar).

Numerics (different from `_blockdot_kernel`, so NOT bit-identical to the decode/default tiles):
- W8A8 (W8A8=True): per 128-K block one e4m3 x e4m3 dot into a fresh fp32 accumulator (the
  Hopper FP8 MMA sums with fewer bits than fp32, so its result is promoted every 128 K), then
  acc += p · (x_scale[row, kb] · w_scale[kb]) — powers of two, exact; blocks add in K order.
- weight-only (W8A8=False, bf16 x): the weight tile is widened e4m3 → bf16 (exact: 4 significant
  bits) and multiplied by its block scale in bf16 (a power of two, 2^-127 .. 2^127: exact while the
  product stays a normal bf16, i.e. |w| >= 2^-126; bf16 has fp32's exponent range), then
  acc = dot(w_bf16, x_bf16ᵀ, acc): ONE chained fp32 accumulator over all of K, no per-block
  promotion and no activation scaling. Products are exact in fp32 (8 x 4 significant bits) as
  long as they stay in fp32's normal range (|x·w| >= 2^-126; the default tile's per-block
  activation scaling also covers activations below ~2^-90, this tile does not); only the MMA's
  fp32 summation rounds, in an order that differs from the default tile's (per block, then
  across blocks), so the results agree to ~1e-7 but not bit for bit.
- a row's bits do not depend on M: the K order and the instruction sequence of a tile are the
  same for every tile position; the launcher fixes the config per layer shape (never on M) and
  never splits K. They do depend on the config (BLOCK_K changes the chain), so a layer must keep
  one config.
- DOT == 0 (the interpreter): each step is an explicit fp32 product-and-sum over BLOCK_K
  channels (the interpreter's 16-bit dot is wrong), added to acc per step in both modes.
"""

from __future__ import annotations

import triton
import triton.language as tl

from mxserve.kernels.linear_fp8_block._linear_fp8_block_kernel import _ue8m0_to_fp32


@triton.jit(do_not_specialize=["M"])  # run-time size: one compile for every M
def _prefill_fast_kernel(
    x_ptr, xs_ptr, w_ptr, ws_ptr, out_ptr,
    M, N, K,
    stride_xm, stride_xsm, stride_wn, stride_wsn, stride_om,
    BLOCK_M: tl.constexpr,  # tokens per tile (the wgmma's N dimension)
    BLOCK_N: tl.constexpr,  # output features per tile; divides 128 (one scale row per tile)
    BLOCK_K: tl.constexpr,  # 128 for W8A8 (one scale per step); 64 or 128 weight-only
    GROUP_M: tl.constexpr,  # m-tiles per column of the program order (L2 reuse)
    EVEN_K: tl.constexpr,  # K % BLOCK_K == 0: no K mask in the loop
    W8A8: tl.constexpr,  # x = e4m3fn values with fp32 scales [M, ceil(K/128)]; else bf16 x
    DOT: tl.constexpr,  # 0 interpreter product-sum, 1 fp16 MMA (no FP8 tensor cores), 2 FP8 MMA / bf16 MMA
):
    """Grid (cdiv(M, BLOCK_M) · cdiv(N, BLOCK_N),): out[M, N] fp32 = x · Wᵀ (stride_om per row)."""
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * num_pid_n
    first_m = (pid // per_group) * GROUP_M
    group_rows = tl.minimum(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % group_rows
    pid_n = (pid % per_group) // group_rows

    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_k = tl.arange(0, BLOCK_K)
    n_mask = offs_n < N
    m_mask = offs_m < M
    w_ptrs = w_ptr + offs_n[:, None] * stride_wn + offs_k[None, :]
    x_ptrs = x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :]
    scale_row = ws_ptr + ((pid_n * BLOCK_N) // 128) * stride_wsn
    if W8A8:
        # acc[BLOCK_M, BLOCK_N] (not swapped): a thread of the wgmma layout holds 2 token rows, so
        # 2 activation scales per step instead of 32 (swapped: 255 registers and spills, sm_90)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ks in range(tl.cdiv(K, BLOCK_K)):
            w, x = _load_step(w_ptrs, x_ptrs, ks * BLOCK_K, K, offs_k, n_mask, m_mask, EVEN_K)
            kb = ks * BLOCK_K // 128
            w_scale = _ue8m0_to_fp32(tl.load(scale_row + kb))
            x_scale = tl.load(xs_ptr + offs_m * stride_xsm + kb, mask=m_mask, other=0.0)
            if DOT == 0:
                p = tl.sum(x.to(tl.float32)[:, None, :] * w.to(tl.float32)[None, :, :], axis=2)
            elif DOT == 1:
                p = tl.dot(x.to(tl.float16), tl.trans(w.to(tl.float16)))  # exact products
            else:
                p = tl.dot(x, tl.trans(w))  # e4m3 x e4m3 on FP8 tensor cores (both from shared memory)
            acc += p * (x_scale[:, None] * w_scale)
        o_mask = m_mask[:, None] & n_mask[None, :]
        tl.store(out_ptr + offs_m[:, None] * stride_om + offs_n[None, :], acc, mask=o_mask)
    else:
        # acc[BLOCK_N, BLOCK_M] (swapped): the widened weight tile is the wgmma's register operand
        acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
        for ks in range(tl.cdiv(K, BLOCK_K)):
            w, x = _load_step(w_ptrs, x_ptrs, ks * BLOCK_K, K, offs_k, n_mask, m_mask, EVEN_K)
            w_scale = _ue8m0_to_fp32(tl.load(scale_row + ks * BLOCK_K // 128))
            if DOT == 0:
                wf = w.to(tl.float32) * w_scale  # the interpreter's e4m3 -> bf16 cast is wrong (triton 3.9)
                acc += tl.sum(wf[:, None, :] * x.to(tl.float32)[None, :, :], axis=2)
            else:
                # e4m3 -> f16 -> bf16 (exact), times the block scale in bf16 (a power of two: exact);
                # 356 K-loop instructions instead of 387 through fp32 (sm_90, Triton 3.9)
                wv = w.to(tl.bfloat16) * w_scale.to(tl.bfloat16)
                acc = tl.dot(wv, tl.trans(x), acc)  # bf16 MMA, one fp32 chain over K
        o_mask = n_mask[:, None] & m_mask[None, :]
        tl.store(out_ptr + offs_m[None, :] * stride_om + offs_n[:, None], acc, mask=o_mask)


@triton.jit
def _load_step(w_ptrs, x_ptrs, k0, K, offs_k, n_mask, m_mask, EVEN_K: tl.constexpr):
    """The weight tile [BLOCK_N, BLOCK_K] and activation tile [BLOCK_M, BLOCK_K] at K offset k0;
    zeros past N, M and (unless EVEN_K) K. The pointers are typed e4m3fn for FP8 operands, so
    the loads feed the wgmma from shared memory with no bitcast in between."""
    if EVEN_K:
        w = tl.load(w_ptrs + k0, mask=n_mask[:, None], other=0.0)
        x = tl.load(x_ptrs + k0, mask=m_mask[:, None], other=0.0)
    else:
        k_mask = offs_k < K - k0
        w = tl.load(w_ptrs + k0, mask=n_mask[:, None] & k_mask[None, :], other=0.0)
        x = tl.load(x_ptrs + k0, mask=m_mask[:, None] & k_mask[None, :], other=0.0)
    return w, x
