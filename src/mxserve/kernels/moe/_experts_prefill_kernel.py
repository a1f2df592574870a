"""Private Triton code of the MXFP4 prefill tile (variant "bf16-prefill"); launched only through `prefill.py`.

Why it exists (issue 10, H200, session 5 call 3): the fused kernel (`_experts_kernel.py`) ran the
Flash MoE at 4096 tokens in 65.2 ms, ~19 TFLOP/s, against 6.3 ms for a bf16 grouped matmul, and
53 ms with every token on the same 6 experts, so the cost is in each program, not in the
schedule. Its K loop (sm_90 SASS, `tests/kernels/moe/sm90_compile_prefill.py`) pipelines only
the weight codes: the group scales (a 1-byte gather per weight element) and the activations
(even and odd columns, 2-byte gathers at a 4-byte stride, read once for gate and again for up)
are plain loads that every 128-K block waits for; ~800 instructions per warp a block, 245
registers (one 8-warp program per SM, nothing to hide those waits). This tile computes the same
numbers with the stream decode's K loop (`_experts_stream_kernel.py`) at prefill row counts:

* every load of the K loop is 4-16 bytes a thread and feeds the loop's dots, so Triton pipelines
  all of them: the activations come as two contiguous 64-column halves of a copy of x stored in
  even-then-odd order per 128-block (the stream prep kernel), the 4 UE8M0 bytes of a row's 128-K
  block as one int32 word, the codes as 64 bytes a row;
* gate and up run in ONE K loop: each activation tile is loaded once and feeds both, and the
  SwiGLU epilogue (`_swiglu_values`, the same ops as every other path) follows in registers;
* the hidden state h is stored at the row's sorted position (rows of a block are consecutive) in
  even-then-odd order, so the down kernel reads it as contiguous halves too;
* rows come from the align sort (`align.py`) in blocks of BLOCK_M (32 / 64 / 128 by the call's
  pairs per expert, `prefill.tile_for`: one decode of a weight tile serves that many rows), so no
  program scans the routing;
* I and D are compile-time constants (one compile per layer shape): with a run-time K the loop's
  zero-trip path hands the accumulators' zero init to the wgmma wait at the loop exit, and ptxas
  then serializes every wgmma of the loop (advisory C7515: a wait after each 64x64x16 MMA, so no
  decode overlaps an MMA); with K known it issues them in batches of 4 and decodes the next
  weight tile while they run (`tests/kernels/moe/sm90_compile_prefill.py` reports both).

Bit-identity with "bf16-split" / "bf16-stream" (and "bf16-fused", as they are): the weights are the
same exact bf16 values (`_mxfp4_quads_bf16`), the activations the same values, each output
element's sum runs over K in the same order (128-K blocks in order, the even then the odd half,
`_dot_part`: the same 64-deep wgmma sequence per element whatever BLOCK_M and BLOCK_N), the hidden
state comes from `_swiglu_values` over whole 128-channel blocks, and the combine is
`_moe_combine_kernel`. A row's result depends on nothing but its own data: batch invariant.

MMA_ORDER (the switch `MXSERVE_MOE_MMA_ORDER=1`, `experts.py`): the K order of variant
"bf16-stream-splitk" without a K split, so that order can be the default at EVERY size (a token's bits
must not depend on the batch). x and h are stored in `_mma_pos` order, the codes are loaded in
`_tile_row` order and every widened [BLOCK_N, 64] half-block is relabelled by `_to_mma` before its dot:
logically the dot then pairs the same weight with the same activation at the same K index as the
splitk decode's, 128-K blocks in order, even half then odd half, one accumulator over all of K. The MMA
sums K in groups of 16 in index order whatever BLOCK_M / BLOCK_N (as above), so each output element gets
the splitk decode's bits. Off: the same operations as before (constexpr branches).
"""

from __future__ import annotations

import triton
import triton.language as tl

from mxserve.kernels.act_quant._act_quant_kernel import clamp_e4m3, exp2_bits, pow2_scale_exponent, round_e4m3
from mxserve.kernels.moe._experts_kernel import _block_rows, _dot_part, _swiglu_values
from mxserve.kernels.moe._experts_stream_kernel import _even_odd, _mma_pos, _mxfp4_quads_bf16
from mxserve.kernels.moe._experts_stream_splitk_kernel import _tile_row, _to_mma


@triton.jit
def _store_pos(j, MMA_ORDER: tl.constexpr):
    """Where column j of a 128-block is stored: `_mma_pos` (MMA_ORDER) or even-then-odd."""
    if MMA_ORDER:
        return _mma_pos(j)
    else:
        return _even_odd(j)


@triton.jit
def _load_rows(n0, BLOCK_N: tl.constexpr, MMA_ORDER: tl.constexpr):
    """Weight rows in load order: n0 + `_tile_row(r)` (MMA_ORDER: `_to_mma` puts them back at n0 + n)."""
    r = tl.arange(0, BLOCK_N)
    if MMA_ORDER:
        return n0 + _tile_row(r)
    else:
        return n0 + r


@triton.jit
def _relabel(lo, hi, BLOCK_N: tl.constexpr, MMA_ORDER: tl.constexpr):
    if MMA_ORDER:
        return _to_mma(lo, BLOCK_N), _to_mma(hi, BLOCK_N)
    else:
        return lo, hi


@triton.jit(do_not_specialize=["num_rows"])  # run-time sizes: one compile for every value
def _moe_prefill_prep_kernel(x_ptr, xp_ptr, num_rows, stride_x, stride_xp, QUANT: tl.constexpr, ROWS: tl.constexpr,
                             MMA_ORDER: tl.constexpr = False):
    """Program (ROWS tokens, 128-block kb): xp[t, block kb] = x (QUANT: `fake_quant_fp8`'s values) in
    even-then-odd order (MMA_ORDER: `_mma_pos`'s), in xp's dtype: `_moe_stream_prep_kernel`'s operations
    row for row (so its values, bit for bit), ROWS tokens a program. That one runs a 1-warp program per (token, block),
    131k programs at 4096 tokens: 80 us on the H200 (session 6 call 3), 1.7% of the prefill call."""
    t = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    kb = tl.program_id(1)
    j = tl.arange(0, 128)
    rows = (t < num_rows)[:, None]
    x = tl.load(x_ptr + t[:, None].to(tl.int64) * stride_x + (kb * 128 + j)[None, :], mask=rows, other=0)
    x = x.to(tl.float32)
    if QUANT:
        amax = tl.max(tl.abs(x), axis=1)
        has_nan = tl.max((x != x).to(tl.int32), axis=1) > 0  # the reference's NaN amax → the largest scale
        e = tl.where(has_nan, 127, pow2_scale_exponent(amax))
        q = round_e4m3(clamp_e4m3(x * exp2_bits(-e)[:, None]))
        x = q * exp2_bits(e)[:, None]
    tl.store(xp_ptr + t[:, None].to(tl.int64) * stride_xp + (kb * 128 + _store_pos(j, MMA_ORDER))[None, :],
             x.to(xp_ptr.dtype.element_ty), mask=rows)


@triton.jit
def _w_block(w_rows, s_rows, k0, half, shifts, BLOCK_N: tl.constexpr, USE_ASM: tl.constexpr,
             MMA_ORDER: tl.constexpr = False):
    """(even-K, odd-K) exact weights [BLOCK_N, 64] of the 128-K block at k0: codes 64 bytes a row,
    scales one int32 word a row (byte g = group g; the shift's sign bits masked). MMA_ORDER: the rows
    were loaded in `_load_rows` order and the halves come back relabelled by `_to_mma`."""
    wb = tl.load(w_rows + (k0 // 2 + half)[None, :])
    sw = tl.load(s_rows + k0 // 128)
    sb = (sw[:, None] >> shifts[None, :]) & 255
    lo, hi = _mxfp4_quads_bf16(wb, sb, BLOCK_N, USE_ASM)
    return _relabel(lo, hi, BLOCK_N, MMA_ORDER)


@triton.jit(do_not_specialize=["num_pairs"])  # run-time sizes: one compile for every value
def _moe_prefill_gate_up_kernel(
    xp_ptr, w1_ptr, w1s_ptr, w3_ptr, w3s_ptr,
    sorted_ptr, block_expert_ptr, expert_start_ptr, expert_count_ptr, route_w_ptr,
    h_ptr,
    I: tl.constexpr, D: tl.constexpr, num_pairs, top_k, limit,
    stride_x, stride_we, stride_wn, stride_wse, stride_wsn, stride_h,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DOT: tl.constexpr, X_PIECES: tl.constexpr,
    USE_ASM: tl.constexpr, H_BF16: tl.constexpr, QUANT_H: tl.constexpr, MMA_ORDER: tl.constexpr = False,
):
    """Program (128-channel block, row block): h[pos, block] = SwiGLU(x · W1_eᵀ, x · W3_eᵀ) · routing
    weight for the block's rows, rounded / fake-quantized as `_swiglu_values` does, stored in
    even-then-odd order (MMA_ORDER: `_mma_pos`'s; module docstring). xp: x (its operand values) in even-then-odd order per 128-block; w1s, w3s:
    the scales as int32 words [E, I, D/128]; I, D multiples of 128."""
    expert, pos, pair, valid = _block_rows(sorted_ptr, block_expert_ptr, expert_start_ptr, expert_count_ptr,
                                           num_pairs, BLOCK_M)
    if expert < 0:
        return
    tl.static_assert(BLOCK_N == 128, "gate/up programs are one 128-channel fake-quantization block of h")
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_load = _load_rows(tl.program_id(0) * BLOCK_N, BLOCK_N, MMA_ORDER)
    token = pair // top_k
    e64 = expert.to(tl.int64)
    half = tl.arange(0, 64)
    shifts = tl.arange(0, 4) * 8
    w1_rows = w1_ptr + e64 * stride_we + offs_load[:, None] * stride_wn
    w3_rows = w3_ptr + e64 * stride_we + offs_load[:, None] * stride_wn
    s1_rows = w1s_ptr + e64 * stride_wse + offs_load * stride_wsn
    s3_rows = w3s_ptr + e64 * stride_wse + offs_load * stride_wsn
    x_rows = xp_ptr + token[:, None].to(tl.int64) * stride_x
    x_mask = valid[:, None]
    g = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    u = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    for k0 in range(0, D, 128):
        x_even = tl.load(x_rows + (k0 + half)[None, :], mask=x_mask, other=0)
        x_odd = tl.load(x_rows + (k0 + 64 + half)[None, :], mask=x_mask, other=0)
        lo, hi = _w_block(w1_rows, s1_rows, k0, half, shifts, BLOCK_N, USE_ASM, MMA_ORDER)
        g = _dot_part(lo, x_even, g, DOT, X_PIECES)
        g = _dot_part(hi, x_odd, g, DOT, X_PIECES)
        lo, hi = _w_block(w3_rows, s3_rows, k0, half, shifts, BLOCK_N, USE_ASM, MMA_ORDER)
        u = _dot_part(lo, x_even, u, DOT, X_PIECES)
        u = _dot_part(hi, x_odd, u, DOT, X_PIECES)
    keep = valid[None, :] & (offs_n < I)[:, None]
    h, _, _ = _swiglu_values(g, u, pair, valid, keep, route_w_ptr, limit, H_BF16, QUANT_H)
    dst = (h_ptr + pos[None, :].to(tl.int64) * stride_h
           + (tl.program_id(0) * BLOCK_N + _store_pos(tl.arange(0, BLOCK_N), MMA_ORDER))[:, None])
    if H_BF16:
        tl.store(dst, h.to(tl.bfloat16), mask=keep)
    else:
        tl.store(dst, h, mask=keep)


@triton.jit(do_not_specialize=["num_pairs"])  # run-time sizes: one compile for every value
def _moe_prefill_down_kernel(
    h_ptr, w2_ptr, w2s_ptr,
    sorted_ptr, block_expert_ptr, expert_start_ptr, expert_count_ptr,
    y_ptr,
    I: tl.constexpr, D: tl.constexpr, num_pairs,
    stride_h, stride_we, stride_wn, stride_wse, stride_wsn, stride_y,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DOT: tl.constexpr, X_PIECES: tl.constexpr,
    USE_ASM: tl.constexpr, MMA_ORDER: tl.constexpr = False,
):
    """Program (n-tile, row block): y[pair, n] = h[pos, :] · W2_e[n, :]ᵀ (the routing weight is in h;
    h in even-then-odd order per 128-block (MMA_ORDER: `_mma_pos`'s), rows at sorted positions).
    D % BLOCK_N == 0."""
    expert, pos, pair, valid = _block_rows(sorted_ptr, block_expert_ptr, expert_start_ptr, expert_count_ptr,
                                           num_pairs, BLOCK_M)
    if expert < 0:
        return
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_load = _load_rows(tl.program_id(0) * BLOCK_N, BLOCK_N, MMA_ORDER)
    e64 = expert.to(tl.int64)
    half = tl.arange(0, 64)
    shifts = tl.arange(0, 4) * 8
    w_rows = w2_ptr + e64 * stride_we + offs_load[:, None] * stride_wn
    s_rows = w2s_ptr + e64 * stride_wse + offs_load * stride_wsn
    h_rows = h_ptr + pos[:, None].to(tl.int64) * stride_h
    h_mask = valid[:, None]
    acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    for k0 in range(0, I, 128):
        h_even = tl.load(h_rows + (k0 + half)[None, :], mask=h_mask, other=0)
        h_odd = tl.load(h_rows + (k0 + 64 + half)[None, :], mask=h_mask, other=0)
        lo, hi = _w_block(w_rows, s_rows, k0, half, shifts, BLOCK_N, USE_ASM, MMA_ORDER)
        acc = _dot_part(lo, h_even, acc, DOT, X_PIECES)
        acc = _dot_part(hi, h_odd, acc, DOT, X_PIECES)
    tl.store(y_ptr + pair[None, :].to(tl.int64) * stride_y + offs_n[:, None], acc, mask=valid[None, :])
