"""Private Triton code of the block-scaled FP8 linear; launched only through `triton.py`.

One kernel serves decode and prefill; the launcher picks tile sizes. It computes the transposed
tile acc[BLOCK_N, BLOCK_M] = W[n-tile, :] · X[m-tile, :]ᵀ ("swap AB"): the widened weight tile is
the dot's left operand, so at decode the 16-wide token tile is the small side of the MMA and the
weights stream through the large side.

Numerics (why the order is fixed): for every 128-wide K block the raw codes are widened in
registers, one dot gives the block's partial sum (a fresh fp32 accumulator), and the block scale
2^(b-127) (times the activation block scale for W8A8) multiplies that partial sum before it is
added: sum_b s_b * (sum_k x*w) -- the scale is read once per 128x128 weights and the multiply is
exact (a power of two). K blocks are grouped into fixed runs of KB_PER_GROUP (a function of the
layer's N and K only); each run sums into its own accumulator and the runs are added in order,
either in this program (GROUPS_PER_PROGRAM == 0) or by `_sum_groups_kernel` over a workspace
(split-K grid). Both give the same bits, and nothing depends on M, so a row's result does not
depend on the batch it is in.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _ue8m0_to_fp32(b):
    """2^(b-127) built from its bit pattern: exact for every byte (0 → the fp32 subnormal 2^-127,
    255 → NaN), with no exp2 approximation."""
    b = b.to(tl.int32)
    bits = tl.where(b == 0, 0x00400000, tl.where(b == 255, 0x7FC00000, b << 23))
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _linear_fp8_block_kernel(
    x_ptr, xs_ptr, w_ptr, ws_ptr, lut_ptr, out_ptr,
    M, N, K,
    stride_xm, stride_xsm, stride_wn, stride_wsn, stride_og, stride_om,
    KB_PER_GROUP,
    BLOCK_M: tl.constexpr,  # tokens per tile (16 at decode)
    BLOCK_N: tl.constexpr,  # output features per tile; divides 128 (one scale row per tile)
    GROUPS_PER_PROGRAM: tl.constexpr,  # 1: split-K grid, one group's partial each; 0: all groups
    ONE_GROUP: tl.constexpr,  # the layer has a single group: no second accumulator (registers)
    X_FP8: tl.constexpr,  # x holds e4m3fn codes (uint8) with fp32 scales xs[M, ceil(K/128)]
    X_PIECES: tl.constexpr,  # float x only, DOT==1: 1 = x as bf16, 2 = fp32 x split hi + lo bf16
    DOT: tl.constexpr,  # 0: fp32 product-sum (interpreter), 1: bf16 tensor cores, 2: fp8 e4m3 tensor cores
    W_LUT: tl.constexpr,  # True: widen codes through a 256-entry fp32 table (any 8-bit format)
):
    BLOCK_K: tl.constexpr = 128
    pid_n = tl.program_id(0)
    pid_m = tl.program_id(1)
    pid_g = tl.program_id(2)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_k = tl.arange(0, BLOCK_K)
    n_mask = offs_n < N
    m_mask = offs_m < M
    scale_row = ws_ptr + ((pid_n * BLOCK_N) // 128) * stride_wsn
    num_kb = tl.cdiv(K, BLOCK_K)

    if GROUPS_PER_PROGRAM == 1:  # split-K grid: this program owns one group of K blocks
        kb_begin = pid_g * KB_PER_GROUP
        kb_end = tl.minimum(kb_begin + KB_PER_GROUP, num_kb)
    else:
        kb_begin = 0
        kb_end = num_kb

    # One flat loop (so the software pipeline spans every K block); a group closes where
    # (kb + 1) is a multiple of KB_PER_GROUP or at the last block: total += acc, acc = 0.
    total = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    for kb in range(kb_begin, kb_end):
        k = kb * BLOCK_K + offs_k
        k_mask = k < K
        w = tl.load(w_ptr + offs_n[:, None] * stride_wn + k[None, :],
                    mask=n_mask[:, None] & k_mask[None, :], other=0)
        x = tl.load(x_ptr + offs_m[:, None] * stride_xm + k[None, :],
                    mask=m_mask[:, None] & k_mask[None, :], other=0)
        if DOT == 2:
            # FP8 tensor cores: both operands as e4m3fn, products exact, a fresh accumulator
            # per 128-K block so the MMA's reduced-precision accumulation never spans blocks
            blk = tl.dot(w.to(tl.float8e4nv, bitcast=True), tl.trans(x.to(tl.float8e4nv, bitcast=True)))
        else:
            if W_LUT:
                wv = tl.load(lut_ptr + w.to(tl.int32))  # fp32 values, exact for every code
            else:
                wv = w.to(tl.float8e4nv, bitcast=True)
            if X_FP8:
                x = x.to(tl.float8e4nv, bitcast=True)
            if DOT == 0:
                # interpreter: an explicit product-and-sum over the 128 channels, whose order
                # depends only on K (numpy's matmul blocking would change with the tile shape)
                blk = tl.sum(wv.to(tl.float32)[:, None, :] * x.to(tl.float32)[None, :, :], axis=2)
            else:
                wb = wv.to(tl.bfloat16)  # e4m3 → bf16 is exact
                if X_PIECES == 2:
                    xf = x.to(tl.float32)
                    hi = xf.to(tl.bfloat16)
                    lo = (xf - hi.to(tl.float32)).to(tl.bfloat16)
                    blk = tl.dot(wb, tl.trans(hi))
                    blk = tl.dot(wb, tl.trans(lo), blk)
                else:
                    blk = tl.dot(wb, tl.trans(x.to(tl.bfloat16)))
        if X_FP8:
            xs = tl.load(xs_ptr + offs_m * stride_xsm + kb, mask=m_mask, other=0.0)
            blk = blk * xs[None, :]
        acc += blk * _ue8m0_to_fp32(tl.load(scale_row + kb))
        if not ONE_GROUP:
            closes = ((kb + 1) % KB_PER_GROUP == 0) | (kb + 1 == num_kb)
            total = tl.where(closes, total + acc, total)
            acc = tl.where(closes, 0.0, acc)
    if ONE_GROUP:
        total = acc

    # out is [groups or 1, M, N]; the tile is transposed on the way out
    out = out_ptr + pid_g * stride_og + offs_m[None, :] * stride_om + offs_n[:, None]
    tl.store(out, total, mask=n_mask[:, None] & m_mask[None, :])


@triton.jit
def _sum_groups_kernel(part_ptr, out_ptr, numel, stride_g, NUM_GROUPS: tl.constexpr, BLOCK: tl.constexpr):
    """out = ((0 + p_0) + p_1) + ... in group order: the same additions as the in-program path."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < numel
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for g in tl.static_range(NUM_GROUPS):
        acc += tl.load(part_ptr + g * stride_g + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, acc, mask=mask)
