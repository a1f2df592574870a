"""Private Triton code of variant "bf16-stream-splitk": the stream decode with the decode into the MMA
registers and split K (issue 10: one token through the Flash MoE in <= 30 us).

Why (H200, session 5): "bf16-stream" (`_experts_stream_kernel.py`) ran one token in 61.4 us (gate/up
38.5 us for ~53 MB = 1.4 TB/s, down ~21), and 16 tokens at ~1.5 TB/s, with enough programs to fill
every SM, so the program count is only part of it. Its sm_90 K loop (Triton 3.6 and 3.9 SASS) widens
the codes in the layout they were loaded in, then moves the 16 KB of bf16 weights of every 128-K
block through shared memory into the wgmma operand layout (8 STS.128 + 8 LDSM a warp, a third
barrier): with the cp.async copies ~48 KB of shared-memory traffic per 4 KB of weights, 45 KB of
shared memory a program at 4 stages (4 programs per SM), and at one token only 384 gate/up programs
(~3 per SM), each walking all 32 K-blocks in a row. Two changes, both in this file:

* **Decode into the MMA registers.** Thread (warp w, lane 4q + c) of the [64, 64] code tile loads 16
  contiguous bytes 16c .. 16c+15 of rows 8w + q and 32 + 8w + q (Triton's blocked layout for it). The
  wgmma A operand wants rows 16w + q, 16w + q + 8 and K pairs {2c, 2c+1, 2c+8, 2c+9} + 16m (m = 0..3,
  one m64n16k16 each). So the widened tile is relabelled (`_to_mma`: a reshape/permute/reshape, no
  data movement): code byte i = 16c + 4m + 2h + p of the half-block becomes K index 16m + 8h + 2c + p,
  and loaded row r becomes tile row `_tile_row(r)` (the load reads the weight rows in that order, so
  tile row n is weight row n). Every thread then already holds its operand registers: the sm_90
  compile (`tests/kernels/moe/sm90_compile_experts.py`) shows no STS/LDSM in the K loop, 2 barriers,
  ~29 KB of shared memory at 4 stages and 7 programs per SM by registers and shared memory. The
  activations are stored in the same K order (`_mma_pos`, by the prep kernel for x and by the gate/up
  epilogue for h), so the products are the same; they are summed in other groups of 16 per wgmma than
  in "bf16-stream" (there each wgmma took 16 consecutive code bytes), so the fp32 sums differ in the
  last bits: a new variant with a stated tolerance, not the old bits.
* **Split K.** Gate/up (K = D) and down (K = I) run SPLITS = cdiv(K, K_SPLIT) programs per tile, each
  over K_SPLIT columns (128-K blocks in order, the even then the odd half, as before); K_SPLIT comes
  from the launch configuration, so SPLITS depends on the shapes only, never on the token count. Each
  program stores its fp32 partial to its split's slice of the workspace. The last program to arrive
  (the acq_rel counters of "bf16-stream", `linear_fp8_block`'s kernel docstring "Fused sum" says why
  every partial is then visible) sums them in split order 0, 1, .., SPLITS-1 whatever the arrival
  order: gate/up before the SwiGLU of its 128-channel block (2 · 128/BLOCK_N · SPLITS arrivals), down
  per row before the top-k combine of its (token, tile) (TOP_K · SPLITS arrivals), each token's rows
  in ascending expert id as `_moe_combine_kernel`. So the result does not depend on the schedule.

Batch invariance: a row's sums depend on K, K_SPLIT and the tile only, never on the other rows or
the number of pairs. Up to `experts.MMA_DECODE_MAX_PAIRS` pairs; larger calls take the prefill tile in
the same K order (`_experts_prefill_kernel.py`, MMA_ORDER: x and h in `_mma_pos` order, the `_to_mma`
relabel, one accumulator over all of K), which gives these bits for any row count when there is no K
split (the shipped CONFIG: on the H200 the split was slower, `stream_splitk.py`). So this order can be
the default at every size at once (MXSERVE_MOE_MMA_ORDER=1, `experts.py`), which runs this decode
without a K split whatever CONFIG says; a default "for <= N pairs" would make a row's bits depend on
the batch.
"""

from __future__ import annotations

import triton
import triton.language as tl

from mxserve.kernels.early_start import wait_for_previous
from mxserve.kernels.moe._experts_kernel import _dot_part, _swiglu_values
from mxserve.kernels.moe._experts_stream_kernel import (
    _NO_EXPERT,
    _block_pairs,
    _lead_rank,
    _mma_pos,
    _mxfp4_quads_bf16,
)


@triton.jit
def _tile_row(r):
    """Tile row of loaded row r (`_to_mma`): r = 64t + 32s + 8w + q → 64t + 16w + 8s + q."""
    return (r // 64) * 64 + ((r // 8) % 4) * 16 + ((r // 32) % 2) * 8 + r % 8


@triton.jit
def _to_mma(t, BLOCK_N: tl.constexpr):
    """The widened [BLOCK_N, 64] tile relabelled: loaded row r → `_tile_row(r)`, code byte
    i = 16c + 4m + 2h + p → K index 16m + 8h + 2c + p (module docstring). Values are not changed."""
    t = tl.reshape(t, (BLOCK_N // 64, 2, 4, 8, 4, 4, 2, 2))  # (t, s, w, q | c, m, h, p)
    t = tl.permute(t, (0, 2, 1, 3, 5, 6, 4, 7))  # (t, w, s, q | m, h, c, p)
    return tl.reshape(t, (BLOCK_N, 64))


@triton.jit
def _splitk_matmul(
    x_ptr, rows, valid, stride_x, w_ptr, ws_ptr, stride_wn, stride_wsn, n0, k_lo, k_hi,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DOT: tl.constexpr, X_PIECES: tl.constexpr,
    USE_ASM: tl.constexpr,
):
    """fp32 [BLOCK_N, BLOCK_M] = W[n0 + n, k_lo:k_hi] · X[rows, k_lo:k_hi]ᵀ (k_lo, k_hi multiples of 128;
    x stored in `_mma_pos` order per 128-block; ws_ptr the scales as int32 words, as `_stream_matmul`).
    Per block in order: acc += lo · x_even, then acc += hi · x_odd, the tiles relabelled by `_to_mma`."""
    acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    half = tl.arange(0, 64)
    shifts = tl.arange(0, 4) * 8
    offs_load = n0 + _tile_row(tl.arange(0, BLOCK_N))
    w_rows = w_ptr + offs_load[:, None] * stride_wn
    s_rows = ws_ptr + offs_load * stride_wsn
    x_rows = x_ptr + rows[:, None] * stride_x
    x_mask = valid[:, None]
    for k0 in range(k_lo, k_hi, 128):
        wb = tl.load(w_rows + (k0 // 2 + half)[None, :])
        sw = tl.load(s_rows + k0 // 128)
        sb = (sw[:, None] >> shifts[None, :]) & 255  # [BLOCK_N, 4] scale bytes (the shift's sign bits masked)
        lo, hi = _mxfp4_quads_bf16(wb, sb, BLOCK_N, USE_ASM)
        x_even = tl.load(x_rows + (k0 + half)[None, :], mask=x_mask, other=0)
        x_odd = tl.load(x_rows + (k0 + 64 + half)[None, :], mask=x_mask, other=0)
        acc = _dot_part(_to_mma(lo, BLOCK_N), x_even, acc, DOT, X_PIECES)
        acc = _dot_part(_to_mma(hi, BLOCK_N), x_odd, acc, DOT, X_PIECES)
    return acc


@triton.jit(do_not_specialize=["num_pairs"])  # run-time sizes: one compile for every value
def _moe_splitk_gate_up_kernel(
    xp_ptr, w1_ptr, w1s_ptr, w3_ptr, w3s_ptr, ids_ptr, route_w_ptr,
    gu_ptr, h_ptr, cnt_ptr,
    I, D, num_pairs, top_k, limit,
    stride_x, stride_we, stride_wn, stride_wse, stride_wsn, stride_gus, stride_gu, stride_h,
    SPLITS: tl.constexpr, K_SPLIT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    NP: tl.constexpr, DOT: tl.constexpr, X_PIECES: tl.constexpr, USE_ASM: tl.constexpr, H_BF16: tl.constexpr,
    QUANT_H: tl.constexpr,
    PDL: tl.constexpr = False,  # early start: kernels/early_start.py
):
    """Program (n-tile, pair p, 2·split + gate|up): gu[split, pair, which, n] = x[token] · W_e[n] over the
    split's K columns for the rows led by p; the last of a 128-channel block's 2 · 128/BLOCK_N · SPLITS
    programs sums the splits in order and stores h[pair, block] (`_mma_pos` order)."""
    wait_for_previous(PDL)  # before any load or store (kernels/early_start.py)
    expert, rank, same, q = _lead_rank(ids_ptr, num_pairs, NP)
    if rank % BLOCK_M != 0:
        return
    pair, valid = _block_pairs(rank, same, q, num_pairs, BLOCK_M)
    which = tl.program_id(2) % 2
    split = tl.program_id(2) // 2
    pid_n = tl.program_id(0)
    n0 = pid_n * BLOCK_N
    token = pair // top_k
    e64 = expert.to(tl.int64)
    w_ptr = tl.where(which == 0, w1_ptr, w3_ptr) + e64 * stride_we  # one loop (one set of smem buffers)
    ws_ptr = tl.where(which == 0, w1s_ptr, w3s_ptr) + e64 * stride_wse
    k_lo = split * K_SPLIT
    acc = _splitk_matmul(xp_ptr, token, valid, stride_x, w_ptr, ws_ptr, stride_wn, stride_wsn, n0, k_lo,
                         tl.minimum(k_lo + K_SPLIT, D), BLOCK_M, BLOCK_N, DOT, X_PIECES, USE_ASM)
    gu_rows = gu_ptr + pair[None, :].to(tl.int64) * stride_gu
    offs_n = n0 + tl.arange(0, BLOCK_N)
    tl.store(gu_rows + split * stride_gus + which * I + offs_n[:, None], acc, mask=valid[None, :])

    # The SwiGLU of this 128-channel block, in its last program to arrive ("Fused sum" in
    # linear_fp8_block's kernel docstring: barrier, acq_rel counter, .cg reads).
    tl.debug_barrier()  # bar.sync: every thread's gu stores precede the release below
    blk = pid_n // (128 // BLOCK_N)
    arrived = tl.atomic_add(cnt_ptr + tl.program_id(1) * (I // 128) + blk, 1, sem="acq_rel", scope="gpu")
    if arrived == 2 * (128 // BLOCK_N) * SPLITS - 1:
        offs_h = blk * 128 + tl.arange(0, 128)
        keep = (offs_h < I)[:, None] & valid[None, :]
        g_ptrs = gu_rows + offs_h[:, None]
        g = tl.load(g_ptrs, mask=keep, other=0.0, cache_modifier=".cg")
        u = tl.load(g_ptrs + I, mask=keep, other=0.0, cache_modifier=".cg")
        for s in tl.static_range(1, SPLITS):  # split order, whatever the arrival order
            g += tl.load(g_ptrs + s * stride_gus, mask=keep, other=0.0, cache_modifier=".cg")
            u += tl.load(g_ptrs + s * stride_gus + I, mask=keep, other=0.0, cache_modifier=".cg")
        h, _, _ = _swiglu_values(g, u, pair, valid, keep, route_w_ptr, limit, H_BF16, QUANT_H)
        dst = h_ptr + pair[None, :].to(tl.int64) * stride_h + (blk * 128 + _mma_pos(tl.arange(0, 128)))[:, None]
        if H_BF16:
            tl.store(dst, h.to(tl.bfloat16), mask=keep)
        else:
            tl.store(dst, h, mask=keep)


@triton.jit(do_not_specialize=["num_pairs"])  # run-time sizes: one compile for every value
def _moe_splitk_down_kernel(
    h_ptr, w2_ptr, w2s_ptr, ids_ptr,
    y_ptr, out_ptr, cnt_ptr,
    I, D, num_pairs,
    stride_h, stride_we, stride_wn, stride_wse, stride_wsn, stride_ys, stride_y, stride_o,
    TOP_K: tl.constexpr, KPAD: tl.constexpr, SPLITS: tl.constexpr, K_SPLIT: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr, NP: tl.constexpr, DOT: tl.constexpr, X_PIECES: tl.constexpr, USE_ASM: tl.constexpr,
    PDL: tl.constexpr = False,  # early start: kernels/early_start.py
):
    """Program (n-tile, pair p, split): y[split, pair, n] = h[pair, split's K] · W2_e[n, split's K]ᵀ for the
    rows led by p; the last of a (token, n-tile)'s TOP_K · SPLITS programs writes out[token, n-tile] =
    Σ over the token's rows in ascending expert id of (Σ over splits in order)."""
    wait_for_previous(PDL)  # before any load or store (kernels/early_start.py)
    expert, rank, same, q = _lead_rank(ids_ptr, num_pairs, NP)
    if rank % BLOCK_M != 0:
        return
    pair, valid = _block_pairs(rank, same, q, num_pairs, BLOCK_M)
    pid_n = tl.program_id(0)
    split = tl.program_id(2)
    n0 = pid_n * BLOCK_N
    e64 = expert.to(tl.int64)
    k_lo = split * K_SPLIT
    y = _splitk_matmul(h_ptr, pair, valid, stride_h, w2_ptr + e64 * stride_we, w2s_ptr + e64 * stride_wse,
                       stride_wn, stride_wsn, n0, k_lo, tl.minimum(k_lo + K_SPLIT, I), BLOCK_M, BLOCK_N, DOT,
                       X_PIECES, USE_ASM)
    offs_n = n0 + tl.arange(0, BLOCK_N)
    tl.store(y_ptr + split * stride_ys + pair[None, :].to(tl.int64) * stride_y + offs_n[:, None], y,
             mask=valid[None, :])

    # The combine of each token whose k-th row of this tile this is (the same barrier + counters).
    tl.debug_barrier()  # bar.sync: every thread's y stores precede the releases below
    token = pair // TOP_K
    arrived = tl.atomic_add(cnt_ptr + token * tl.num_programs(0) + pid_n, 1, mask=valid, sem="acq_rel", scope="gpu")
    last = valid & (arrived == TOP_K * SPLITS - 1)
    if tl.max(last.to(tl.int32), axis=0) > 0:
        # `_moe_combine_kernel`'s order: ((0 + y[e_a]) + y[e_b]) + ... in ascending expert id (ties by
        # slot), each row's splits first summed in split order
        slots = tl.arange(0, KPAD)
        in_k = (slots < TOP_K)[None, :]
        ids = tl.load(ids_ptr + token[:, None].to(tl.int64) * TOP_K + slots[None, :], mask=last[:, None] & in_k,
                      other=0)
        key = tl.where(in_k, ids * KPAD + slots[None, :], _NO_EXPERT)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for _ in tl.static_range(TOP_K):
            j = tl.argmin(key, axis=1)
            src = y_ptr + (token.to(tl.int64) * TOP_K + j)[:, None] * stride_y + offs_n[None, :]
            row = tl.load(src, mask=last[:, None], other=0.0, cache_modifier=".cg")
            for s in tl.static_range(1, SPLITS):
                row += tl.load(src + s * stride_ys, mask=last[:, None], other=0.0, cache_modifier=".cg")
            acc += row
            key = tl.where(slots[None, :] == j[:, None], _NO_EXPERT, key)
        tl.store(out_ptr + token[:, None].to(tl.int64) * stride_o + offs_n[None, :], acc, mask=last[:, None])
