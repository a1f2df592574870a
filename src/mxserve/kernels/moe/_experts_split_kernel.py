"""Private Triton code of the split decode path of the MXFP4 experts (variant "bf16-split").

Why it exists (issue 10, H200): the fused decode kernel (`_experts_kernel.py`) issues ~0.62 warp
instructions per weight byte in its K loop (sm_90 SASS: nibble → int32 → fp16 pattern → fp32, a
per-element gather of the group scale and its UE8M0 decode, an fp32 multiply, fp32 → bf16), 3.7x
the FP8 repack's 0.17, and at 1 token it runs 96 programs of 4 warps (254 registers each) on 132
SMs. This path computes the same numbers with fewer instructions and a wider grid:

* the 4 UE8M0 bytes of a row's 128-K block are one load, turned once into the bf16 factor
  2^(b-1) (exact for b <= 128; the chooser checks the layer at load),
* a nibble s·e1e0·m becomes the bf16 bit pattern s<<15 | e1e0m<<6, whose value is exactly
  e2m1 · 2^-126 (code 1 is the bf16 subnormal 2^-127), two per PTX integer op sequence, times
  2^(b-1) by bf16x2 multiplies: e2m1 · 2^(b-127), exact, with no fp32 round trip and no 2^14 to
  give back (sm_90 SASS of the K loop: 0.33 warp instructions per weight byte, 128 registers),
* gate and up are separate programs of 64 output features (one wgmma warpgroup tile), so one token
  runs 2 · I/64 programs per hit expert for gate/up and D/64 for down; the clamped SwiGLU, routing
  weight, hidden rounding and FP8 fake quantization (whole 128-channel blocks) run in a small
  second launch on the fp32 gate/up sums of the valid rows.

Bit-identity with the fused "bf16" variant: every weight value is the same (exact), each output
element's sum runs over K in the same order (128-K blocks in order, even then odd columns, the
same `_dot_part`), and a 64-feature tile issues the same per-element MMA sequence as one half of
the 128-feature tile. So results equal the fused path's bit for bit (and stay batch invariant),
except where the fused path's 2^-14-scaled operands were fp32/bf16 subnormal (scale bytes near
16 times tiny activations), where this path is the exact one.
"""

from __future__ import annotations

import triton
import triton.language as tl

from mxserve.kernels.moe._experts_kernel import _block_rows, _dot_part, _load_x_half, _swiglu_epilogue

# PTX for 2 code bytes b0, b1 (element i in byte i) → their low nibbles as a bf16 pair ($0) and their
# high nibbles ($1), element i in the low half. t = b0 | b1 << 16 (prmt); n = t & 0x000F000F;
# n · 0x1040 = n << 6 | n << 12 (no overlap, so no carry) puts e1e0m at bits 8:6 and the sign at bit
# 15 of each half; & 0x81C081C0 keeps just those. High nibbles: n = t & 0x00F000F0, times 0x104.
# Pairs, not quads: the wgmma A operand holds 2 consecutive K per register, so 2 bytes is what one
# shared-memory read gives a thread (quads cost a repack of 4 bytes, then the prmt takes them apart).
_E2M1_PAIRS_PTX = tl.constexpr("""
{
.reg .b32 t, n;
cvt.u32.u16 t, $2;
prmt.b32 t, t, 0, 0x4140;
and.b32 n, t, 0x000F000F;
mul.lo.u32 n, n, 0x1040;
and.b32 $0, n, 0x81C081C0;
and.b32 n, t, 0x00F000F0;
mul.lo.u32 n, n, 0x104;
and.b32 $1, n, 0x81C081C0;
}
""")


@triton.jit
def _mxfp4_block_bf16(wb, sb, BLOCK_N: tl.constexpr, USE_ASM: tl.constexpr):
    """One 128-K block of MXFP4 rows → (even-K, odd-K) weights [BLOCK_N, 64] each, exact: bf16 on the
    GPU; under the interpreter the same values in fp32 (its bf16 arithmetic is not IEEE: a bf16
    product of these exact operands came out wrong, and bitcast bf16 subnormals read as 0).

    wb: code bytes [BLOCK_N, 64] (low nibble = even K); sb: the block's 4 UE8M0 bytes [BLOCK_N, 4]."""
    if USE_ASM:
        lo, hi = tl.inline_asm_elementwise(_E2M1_PAIRS_PTX, "=r,=r,h", [wb], dtype=(tl.bfloat16, tl.bfloat16),
                                           is_pure=True, pack=2)
        scale = ((sb.to(tl.int16) + 126) << 7).to(tl.bfloat16, bitcast=True)  # 2^(b-1), b <= 128
    else:  # the same bits one step wider: s<<31 | e1e0m<<22 is e2m1 · 2^-126 in fp32
        w32 = wb.to(tl.int32)
        lo = (((w32 & 8) << 28) | ((w32 & 7) << 22)).to(tl.float32, bitcast=True)
        hi = (((w32 & 0x80) << 24) | ((w32 & 0x70) << 18)).to(tl.float32, bitcast=True)
        scale = ((sb.to(tl.int32) + 126) << 23).to(tl.float32, bitcast=True)
    scale = tl.reshape(tl.broadcast_to(scale[:, :, None], (BLOCK_N, 4, 16)), (BLOCK_N, 64))
    return lo * scale, hi * scale  # exact products


@triton.jit
def _mxfp4_matmul(
    x_ptr, rows, row_mask, stride_x, w_ptr, ws_ptr, stride_wn, stride_wsn, offs_n, n_mask, K,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DOT: tl.constexpr, X_PIECES: tl.constexpr,
    USE_ASM: tl.constexpr,
):
    """fp32 [BLOCK_N, BLOCK_M] = W[offs_n, :K] · X[rows, :K]ᵀ for one MXFP4 expert matrix; K % 128 == 0."""
    acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    half = tl.arange(0, 64)
    quad = tl.arange(0, 4)
    all_k = half < 64  # K is a multiple of 128 (launcher): no K mask
    for k0 in range(0, K, 128):
        wb = tl.load(w_ptr + offs_n[:, None] * stride_wn + (k0 // 2 + half)[None, :], mask=n_mask[:, None], other=0)
        sb = tl.load(ws_ptr + offs_n[:, None] * stride_wsn + (k0 // 32 + quad)[None, :], mask=n_mask[:, None],
                     other=127)
        lo, hi = _mxfp4_block_bf16(wb, sb, BLOCK_N, USE_ASM)
        x_even = _load_x_half(x_ptr, rows, row_mask, stride_x, k0 + 2 * half, all_k)
        x_odd = _load_x_half(x_ptr, rows, row_mask, stride_x, k0 + 2 * half + 1, all_k)
        acc = _dot_part(lo, x_even, acc, DOT, X_PIECES)
        acc = _dot_part(hi, x_odd, acc, DOT, X_PIECES)
    return acc


@triton.jit(do_not_specialize=['num_pairs'])  # run-time sizes: one compile for every value
def _moe_gate_up_split_kernel(
    x_ptr, w1_ptr, w1s_ptr, w3_ptr, w3s_ptr,
    sorted_ptr, block_expert_ptr, expert_start_ptr, expert_count_ptr,
    gu_ptr,
    I, D, num_pairs, top_k,
    stride_x, stride_we, stride_wn, stride_wse, stride_wsn, stride_gu,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DOT: tl.constexpr, X_PIECES: tl.constexpr,
    USE_ASM: tl.constexpr,
):
    """gu[pos, 0, n] = x[token] · W1_e[n]; gu[pos, 1, n] = x[token] · W3_e[n] (program_id(2): which),
    fp32, valid rows only."""
    expert, pos, pair, valid = _block_rows(sorted_ptr, block_expert_ptr, expert_start_ptr, expert_count_ptr,
                                           num_pairs, BLOCK_M)
    if expert < 0:
        return
    which = tl.program_id(2)
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    n_mask = offs_n < I
    token = pair // top_k
    e64 = expert.to(tl.int64)
    if which == 0:
        acc = _mxfp4_matmul(x_ptr, token, valid, stride_x, w1_ptr + e64 * stride_we, w1s_ptr + e64 * stride_wse,
                            stride_wn, stride_wsn, offs_n, n_mask, D, BLOCK_M, BLOCK_N, DOT, X_PIECES, USE_ASM)
    else:
        acc = _mxfp4_matmul(x_ptr, token, valid, stride_x, w3_ptr + e64 * stride_we, w3s_ptr + e64 * stride_wse,
                            stride_wn, stride_wsn, offs_n, n_mask, D, BLOCK_M, BLOCK_N, DOT, X_PIECES, USE_ASM)
    tl.store(gu_ptr + pos[None, :].to(tl.int64) * stride_gu + which * I + offs_n[:, None], acc,
             mask=n_mask[:, None] & valid[None, :])


@triton.jit(do_not_specialize=['num_pairs'])  # run-time sizes: one compile for every value
def _moe_swiglu_kernel(
    gu_ptr, sorted_ptr, block_expert_ptr, expert_start_ptr, expert_count_ptr, route_w_ptr,
    h_ptr, hs_ptr,
    I, num_pairs, limit,
    stride_gu, stride_h, stride_hs,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, H_BF16: tl.constexpr, QUANT_H: tl.constexpr,
):
    """The fused kernel's epilogue on the split gate/up sums: same inputs, same ops, same h / hs."""
    expert, pos, pair, valid = _block_rows(sorted_ptr, block_expert_ptr, expert_start_ptr, expert_count_ptr,
                                           num_pairs, BLOCK_M)
    if expert < 0:
        return
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    n_mask = offs_n < I
    keep = n_mask[:, None] & valid[None, :]
    src = gu_ptr + pos[None, :].to(tl.int64) * stride_gu + offs_n[:, None]
    g = tl.load(src, mask=keep, other=0.0)
    u = tl.load(src + I, mask=keep, other=0.0)
    _swiglu_epilogue(g, u, pair, pos, valid, n_mask, offs_n, route_w_ptr, h_ptr, hs_ptr, stride_h, stride_hs,
                     limit, H_BF16, QUANT_H, False)


@triton.jit(do_not_specialize=['num_pairs'])  # run-time sizes: one compile for every value
def _moe_down_split_kernel(
    h_ptr, w2_ptr, w2s_ptr,
    sorted_ptr, block_expert_ptr, expert_start_ptr, expert_count_ptr,
    y_ptr,
    I, D, num_pairs,
    stride_h, stride_we, stride_wn, stride_wse, stride_wsn, stride_y,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DOT: tl.constexpr, X_PIECES: tl.constexpr,
    USE_ASM: tl.constexpr,
):
    """y[pair, n] = h[pos, :] · W2_e[n, :]ᵀ (the routing weight is already in h), 64 features a program."""
    expert, pos, pair, valid = _block_rows(sorted_ptr, block_expert_ptr, expert_start_ptr, expert_count_ptr,
                                           num_pairs, BLOCK_M)
    if expert < 0:
        return
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    n_mask = offs_n < D
    e64 = expert.to(tl.int64)
    y = _mxfp4_matmul(h_ptr, pos, valid, stride_h, w2_ptr + e64 * stride_we, w2s_ptr + e64 * stride_wse,
                      stride_wn, stride_wsn, offs_n, n_mask, I, BLOCK_M, BLOCK_N, DOT, X_PIECES, USE_ASM)
    tl.store(y_ptr + pair[None, :].to(tl.int64) * stride_y + offs_n[:, None], y,
             mask=n_mask[:, None] & valid[None, :])
