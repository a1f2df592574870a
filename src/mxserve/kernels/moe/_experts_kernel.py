"""Private Triton code of the routed experts; launched only through `experts.py`.

Rows are (token, slot) pairs sorted by expert into blocks of BLOCK_M (`_align_kernel.py`). Every
program owns one block (one expert) and BLOCK_N output features, and computes the transposed
tile acc[BLOCK_N, BLOCK_M] = W_e[n-tile, :] · X[rows, :]ᵀ ("swap AB": at decode the 16-wide token
tile is the MMA's small side and the weights stream through the large side). A row lane counts
only if its sorted position is below the expert's logical end (start + count, not the padded
end) AND its pair id is below the global pair count; padding lanes never load, store or count.

MXFP4 widening, in registers: the byte tile is split into low nibbles (even columns) and high
nibbles (odd columns), and the activation tile is read as its even and odd columns, so the two
halves are two dots and no interleave is needed. A nibble s·e1e0·m becomes the fp16 bit pattern
s<<15 | e1e0m<<9, whose value is exactly e2m1 · 2^-14 (code 1 lands on the fp16 subnormal 2^-15),
then times the group scale 2^(b-127): exact in fp32 and bf16 for scale bytes >= 16. The 2^14 is
given back once on the accumulator. Numerics per DOT:
  0  fp32 product-sum over each 64-lane half (the interpreter; order depends only on K),
  1  bf16 tensor cores (weights exact in bf16; fp32 x split into hi + lo bf16 halves),
  2  FP8 tensor cores (W4A8 / W8A8): per 128-K block and weight row, the 4 group scales are
     made relative to their max (d = b - max + 6 <= 6, so |w| <= 384 < 448; lossless while the
     row's groups span <= 14 binades, which the chooser checks at load), one fresh dot per block
     is scaled by 2^(max-133) per row and the activation block scale per token.
Batch invariance: a row's sum runs over K in the same order whatever BLOCK_M or the other rows.
"""

from __future__ import annotations

import triton
import triton.language as tl

from mxserve.kernels.act_quant._act_quant_kernel import clamp_e4m3, exp2_bits, pow2_scale_exponent, round_e4m3


@triton.jit
def _ue8m0_to_fp32(b):
    """2^(b-127) from its bit pattern (0 → the subnormal 2^-127, 255 → NaN)."""
    b = b.to(tl.int32)
    bits = tl.where(b == 0, 0x00400000, tl.where(b == 255, 0x7FC00000, b << 23))
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _e2m1_times_2m14(nib):
    """int32 nibble → fp32 e2m1 value · 2^-14, exactly (through the fp16 bit pattern)."""
    bits = ((nib & 8) << 12) | ((nib & 7) << 9)
    return bits.to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)


@triton.jit
def _round_bf16(v):
    """fp32 → the nearest bf16 value (ties to even), in fp32, by bit arithmetic: the interpreter's
    fp32 → bf16 cast truncates, and this must match torch's `.to(torch.bfloat16)` everywhere.
    A NaN stays a NaN (the GPU's NaN 0x7FFFFFFF would carry into -0.0: `round_bf16` says more)."""
    bits = v.to(tl.int32, bitcast=True)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & -65536
    return tl.where(v != v, v, bits.to(tl.float32, bitcast=True))


@triton.jit
def _load_x_half(x_ptr, rows, row_mask, stride_x, cols, col_mask):
    return tl.load(x_ptr + rows[:, None] * stride_x + cols[None, :], mask=row_mask[:, None] & col_mask[None, :],
                   other=0)


@triton.jit
def _dot_part(w, x, acc, DOT: tl.constexpr, X_PIECES: tl.constexpr):
    """acc + w[BN, BK] · x[BM, BK]ᵀ; w is fp32 values (exact in bf16), x float values."""
    if DOT == 0:
        return acc + tl.sum(w[:, None, :] * x.to(tl.float32)[None, :, :], axis=2)
    wb = w.to(tl.bfloat16)
    if X_PIECES == 2:
        xf = x.to(tl.float32)
        hi = xf.to(tl.bfloat16)
        lo = (xf - hi.to(tl.float32)).to(tl.bfloat16)
        acc = tl.dot(wb, tl.trans(hi), acc)
        return tl.dot(wb, tl.trans(lo), acc)
    return tl.dot(wb, tl.trans(x.to(tl.bfloat16)), acc)


@triton.jit
def _expert_matmul(
    x_ptr, xs_ptr, rows, row_mask, stride_x, stride_xs,
    w_ptr, ws_ptr, stride_wn, stride_wsn, offs_n, n_mask, K,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, W_FMT: tl.constexpr, DOT: tl.constexpr,
    X_FP8: tl.constexpr, X_PIECES: tl.constexpr,
):
    """fp32 [BLOCK_N, BLOCK_M] = W[offs_n, :K] · X[rows, :K]ᵀ for one expert's weight.

    W_FMT 0: MXFP4 (bytes [N, K/2], UE8M0 [N, K/32]); 1: FP8 block (e4m3fn [N, K], UE8M0 [N/128, K/128]).
    X_FP8: x holds e4m3fn codes (uint8) with fp32 scales xs[row, K/128] (DOT 0 or 2 only).
    """
    acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    half = tl.arange(0, 64)
    full = tl.arange(0, 128)
    for k0 in range(0, K, 128):
        if X_FP8:
            xs = tl.load(xs_ptr + rows * stride_xs + k0 // 128, mask=row_mask, other=0.0)
        if W_FMT == 0:
            byte_idx = k0 // 2 + half
            b_mask = byte_idx < K // 2
            wmask = n_mask[:, None] & b_mask[None, :]
            wb = tl.load(w_ptr + offs_n[:, None] * stride_wn + byte_idx[None, :], mask=wmask, other=0).to(tl.int32)
            sb = tl.load(ws_ptr + offs_n[:, None] * stride_wsn + (k0 // 32 + half // 16)[None, :],
                         mask=wmask, other=0).to(tl.int32)  # 0: never the row max
            lo = _e2m1_times_2m14(wb & 15)
            hi = _e2m1_times_2m14(wb >> 4)
            x_even = _load_x_half(x_ptr, rows, row_mask, stride_x, k0 + 2 * half, b_mask)
            x_odd = _load_x_half(x_ptr, rows, row_mask, stride_x, k0 + 2 * half + 1, b_mask)
            if X_FP8:  # W4A8: FP8 tensor cores (DOT 2) or the same values summed in fp32 (DOT 0)
                smax = tl.max(sb, axis=1)  # [BN] per-row block exponent
                rel = ((sb - smax[:, None] + 6 + 14 + 127) << 23).to(tl.float32, bitcast=True)
                w_lo = (lo * rel).to(tl.float8e4nv)
                w_hi = (hi * rel).to(tl.float8e4nv)
                xe = x_even.to(tl.float8e4nv, bitcast=True)
                xo = x_odd.to(tl.float8e4nv, bitcast=True)
                if DOT == 2:
                    blk = tl.dot(w_lo, tl.trans(xe))
                    blk = tl.dot(w_hi, tl.trans(xo), blk)
                else:
                    blk = _dot_part(w_lo.to(tl.float32), xe, tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32), 0, 1)
                    blk = _dot_part(w_hi.to(tl.float32), xo, blk, 0, 1)
                acc += blk * _ue8m0_to_fp32(smax - 6)[:, None] * xs[None, :]
            else:
                sc = _ue8m0_to_fp32(sb)
                acc = _dot_part(lo * sc, x_even, acc, DOT, X_PIECES)
                acc = _dot_part(hi * sc, x_odd, acc, DOT, X_PIECES)
        else:
            cols = k0 + full
            c_mask = cols < K
            wmask = n_mask[:, None] & c_mask[None, :]
            codes = tl.load(w_ptr + offs_n[:, None] * stride_wn + cols[None, :], mask=wmask, other=0)
            ws = _ue8m0_to_fp32(tl.load(ws_ptr + (offs_n // 128) * stride_wsn + k0 // 128, mask=n_mask, other=127))
            xv = _load_x_half(x_ptr, rows, row_mask, stride_x, cols, c_mask)
            wf8 = codes.to(tl.float8e4nv, bitcast=True)
            if DOT == 2:
                blk = tl.dot(wf8, tl.trans(xv.to(tl.float8e4nv, bitcast=True)))
                acc += blk * ws[:, None] * xs[None, :]
            elif X_FP8:
                xf = xv.to(tl.float8e4nv, bitcast=True).to(tl.float32)
                blk = _dot_part(wf8.to(tl.float32), xf, tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32), 0, 1)
                acc += blk * ws[:, None] * xs[None, :]
            else:
                acc = _dot_part(wf8.to(tl.float32) * ws[:, None], xv, acc, DOT, X_PIECES)
    if W_FMT == 0 and not X_FP8:
        acc = acc * 16384.0  # the 2^-14 of the widening, given back exactly
    return acc


@triton.jit
def _block_rows(sorted_ptr, block_expert_ptr, expert_start_ptr, expert_count_ptr, num_pairs, BLOCK_M: tl.constexpr):
    """(expert, sorted positions, pair ids, valid) of this program's row block; expert -1 = unused block."""
    blk = tl.program_id(1)
    expert = tl.load(block_expert_ptr + blk)
    pos = blk * BLOCK_M + tl.arange(0, BLOCK_M)
    safe_e = tl.maximum(expert, 0)
    logical_end = tl.load(expert_start_ptr + safe_e) + tl.load(expert_count_ptr + safe_e)
    in_block = pos < logical_end  # the logical size of this expert's rows, not the padded size
    pair = tl.load(sorted_ptr + pos, mask=in_block, other=num_pairs)
    valid = in_block & (pair < num_pairs)  # and the global bound
    return expert, pos, pair, valid


@triton.jit
def _swiglu_values(g, u, pair, valid, keep, route_w_ptr, limit, H_BF16: tl.constexpr, QUANT_H: tl.constexpr):
    """(h, q, scale): h = (silu(min(g, L)) · clamp(u, ±L)) · routing weight for the fp32 gate/up sums g,
    u [BLOCK_N, BLOCK_M], rounded to bf16 (H_BF16) and fake-quantized to e4m3fn over the tile's
    channels (QUANT_H: q the e4m3fn values, scale [BLOCK_M] their power-of-two scales). Every kernel
    that computes the hidden state calls this, so they all round the same way."""
    g = tl.minimum(g, limit)  # upper clamp only
    u = tl.minimum(tl.maximum(u, -limit), limit)
    rw = tl.load(route_w_ptr + pair, mask=valid, other=0.0)
    h = (g / (1.0 + tl.exp(-g))) * u * rw[None, :]
    if H_BF16:
        h = _round_bf16(h)
    q = h
    scale = tl.zeros_like(rw)
    if QUANT_H:  # the faithful quantizer of `act_quant` (NaN in h is not special-cased: it stays NaN)
        e = pow2_scale_exponent(tl.max(tl.where(keep, tl.abs(h), 0.0), axis=0))  # [BM]
        q = round_e4m3(clamp_e4m3(h * exp2_bits(-e)[None, :]))
        scale = exp2_bits(e)
        h = q * scale[None, :]
    return h, q, scale


@triton.jit
def _swiglu_epilogue(g, u, pair, pos, valid, n_mask, offs_n, route_w_ptr, h_ptr, hs_ptr, stride_h, stride_hs,
                     limit, H_BF16: tl.constexpr, QUANT_H: tl.constexpr, H_CODES: tl.constexpr):
    """Stores h[pos, n] for the fp32 gate/up sums g, u [BLOCK_N, BLOCK_M] (see `_moe_gate_up_kernel`);
    with QUANT_H the tile is one 128-channel block of h, program_id(0) its index."""
    keep = n_mask[:, None] & valid[None, :]
    h, q, scale = _swiglu_values(g, u, pair, valid, keep, route_w_ptr, limit, H_BF16, QUANT_H)
    if QUANT_H:  # BLOCK_N is 128: this tile's rows are whole 128-channel blocks of h
        tl.store(hs_ptr + pos * stride_hs + tl.program_id(0), scale, mask=valid)
    dst = h_ptr + pos[None, :] * stride_h + offs_n[:, None]
    if H_CODES:
        tl.store(dst, q.to(tl.float8e4nv).to(tl.uint8, bitcast=True), mask=keep)
    elif H_BF16:
        tl.store(dst, h.to(tl.bfloat16), mask=keep)
    else:
        tl.store(dst, h, mask=keep)


@triton.jit(do_not_specialize=['num_pairs'])  # run-time sizes: one compile for every value
def _moe_gate_up_kernel(
    x_ptr, xs_ptr, w1_ptr, w1s_ptr, w3_ptr, w3s_ptr,
    sorted_ptr, block_expert_ptr, expert_start_ptr, expert_count_ptr, route_w_ptr,
    h_ptr, hs_ptr,
    I, D, num_pairs, top_k, limit,
    stride_x, stride_xs, stride_we, stride_wn, stride_wse, stride_wsn, stride_h, stride_hs,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, W_FMT: tl.constexpr, DOT: tl.constexpr,
    X_FP8: tl.constexpr, X_PIECES: tl.constexpr, H_BF16: tl.constexpr, QUANT_H: tl.constexpr,
    H_CODES: tl.constexpr,
):
    """h[pos, n] = (silu(min(g, L)) · clamp(u, ±L)) · routing weight, rounded to the hidden dtype
    and (QUANT_H) fake-quantized to e4m3fn per 128 channels with a power-of-two scale hs[pos, n/128];
    H_CODES stores the e4m3fn codes (uint8) instead of their values, for the W4A8 down GEMM."""
    expert, pos, pair, valid = _block_rows(sorted_ptr, block_expert_ptr, expert_start_ptr, expert_count_ptr,
                                           num_pairs, BLOCK_M)
    if expert < 0:
        return
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    n_mask = offs_n < I
    token = pair // top_k
    e64 = expert.to(tl.int64)
    g = _expert_matmul(x_ptr, xs_ptr, token, valid, stride_x, stride_xs,
                       w1_ptr + e64 * stride_we, w1s_ptr + e64 * stride_wse, stride_wn, stride_wsn, offs_n, n_mask, D,
                       BLOCK_M, BLOCK_N, W_FMT, DOT, X_FP8, X_PIECES)
    u = _expert_matmul(x_ptr, xs_ptr, token, valid, stride_x, stride_xs,
                       w3_ptr + e64 * stride_we, w3s_ptr + e64 * stride_wse, stride_wn, stride_wsn, offs_n, n_mask, D,
                       BLOCK_M, BLOCK_N, W_FMT, DOT, X_FP8, X_PIECES)
    _swiglu_epilogue(g, u, pair, pos, valid, n_mask, offs_n, route_w_ptr, h_ptr, hs_ptr, stride_h, stride_hs,
                     limit, H_BF16, QUANT_H, H_CODES)


@triton.jit(do_not_specialize=['num_pairs'])  # run-time sizes: one compile for every value
def _moe_down_kernel(
    h_ptr, hs_ptr, w2_ptr, w2s_ptr,
    sorted_ptr, block_expert_ptr, expert_start_ptr, expert_count_ptr,
    y_ptr,
    I, D, num_pairs,
    stride_h, stride_hs, stride_we, stride_wn, stride_wse, stride_wsn, stride_y,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, W_FMT: tl.constexpr, DOT: tl.constexpr,
    X_FP8: tl.constexpr, X_PIECES: tl.constexpr,
):
    """y[pair, n] = h[pos, :] · W2_e[n, :]ᵀ (the routing weight is already in h)."""
    expert, pos, pair, valid = _block_rows(sorted_ptr, block_expert_ptr, expert_start_ptr, expert_count_ptr,
                                           num_pairs, BLOCK_M)
    if expert < 0:
        return
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    n_mask = offs_n < D
    e64 = expert.to(tl.int64)
    y = _expert_matmul(h_ptr, hs_ptr, pos, valid, stride_h, stride_hs,
                       w2_ptr + e64 * stride_we, w2s_ptr + e64 * stride_wse, stride_wn, stride_wsn, offs_n, n_mask, I,
                       BLOCK_M, BLOCK_N, W_FMT, DOT, X_FP8, X_PIECES)
    tl.store(y_ptr + pair[None, :].to(tl.int64) * stride_y + offs_n[:, None], y,
             mask=n_mask[:, None] & valid[None, :])


@triton.jit
def _moe_combine_kernel(
    y_ptr, ids_ptr, out_ptr, D, stride_y, stride_o,
    TOP_K: tl.constexpr, KPAD: tl.constexpr, BLOCK_D: tl.constexpr,
):
    """out[t] = ((0 + y[t, e_a]) + y[t, e_b]) + … over the token's experts in ascending id order
    (ties by slot): the twin's order, and nothing here depends on other tokens."""
    t = tl.program_id(0).to(tl.int64)
    offs_d = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    d_mask = offs_d < D
    slots = tl.arange(0, KPAD)
    ids = tl.load(ids_ptr + t * TOP_K + slots, mask=slots < TOP_K, other=0)
    key = tl.where(slots < TOP_K, ids * KPAD + slots, 0x7FFFFFFFFFFF)
    acc = tl.zeros((BLOCK_D,), dtype=tl.float32)
    for _ in tl.static_range(TOP_K):
        j = tl.argmin(key, axis=0)
        acc += tl.load(y_ptr + (t * TOP_K + j) * stride_y + offs_d, mask=d_mask, other=0.0)
        key = tl.where(slots == j, 0x7FFFFFFFFFFF, key)
    tl.store(out_ptr + t * stride_o + offs_d, acc, mask=d_mask)
