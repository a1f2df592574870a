"""Private Triton kernel of the compressor's pooling step; launched only through `triton_ops.py`.

One program per (token, block of BLOCK_C channels) streams the token's R state rows in chunks
of CHUNK_R, so its working set is a [CHUNK_R, BLOCK_C] fp64 tile whatever R is (issue 11: the
one-program-per-token form held [R, d] = 64K fp64 values at HCA's R = 128: 71 KB of spill
stores per thread, 47 s to compile for sm_90 on the dev box; this form: no spills, ~2 s). The
pooled row then goes through the window KV's norm + RoPE + encode + insert kernel.

Numerics: the softmax-then-sum of `compress_pool_ref`, in fp64, in three passes over the chunks:
the per-channel max (exact in any order), the denominator S = sum_r exp(z_r - max), then
sum_r (exp(z_r - max) / S) * a_r: the same weights and products as the twin, only the order of
the two fp64 sums differs (chunks sequential, rows within a chunk as a tree). That order moves
an fp64 result by a few ulps at most for well-conditioned rows, and the single rounding to fp32
absorbs it unless the fp64 value lies within those ulps of an fp32 rounding boundary (odds near
2^-29 per value; 0 differences in 4M random values when the two orders were emulated in torch);
the tests compare bits against the twin on adversarial rows (wide logit ranges, one dominant
row, exact fp32 ties, absent rows, R not a multiple of the chunk). No online rescaling of a
running sum: that would change the weights' arithmetic, not only the order.
"""

from __future__ import annotations

import triton
import triton.language as tl

from mxserve.kernels.attention_ops._cache_jit import round_bf16
from mxserve.kernels.early_start import wait_for_previous


@triton.jit
def _chunk_offsets(row_slots_ptr, t, r0, c, cm, state_block_size, state_row_stride_words, state_page_words,
                   R: tl.constexpr, M: tl.constexpr, OVERLAP: tl.constexpr, HEAD_DIM: tl.constexpr,
                   CHUNK_R: tl.constexpr):
    """Word offsets of the value channels c of rows r0 .. r0+CHUNK_R-1 of token t, and their mask.

    State rows are fp32 `[a (WIDTH) | z + ape (WIDTH)]`; row(slot) starts at block * page_words +
    pos * row_words. Overlap (CSA): rows r < M use the A half (channels 0..d-1) of the previous
    window, rows r >= M the B half (d..2d-1) of the current one. Absent rows (slot -1) and rows
    past R are masked: they load as value 0 / logit -inf, as the twin reads them.
    """
    rr = r0 + tl.arange(0, CHUNK_R)
    rs = tl.load(row_slots_ptr + t * R + rr, mask=rr < R, other=-1).to(tl.int64)
    s = tl.maximum(rs, 0)
    sb = s // state_block_size
    row_base = sb * state_page_words + (s - sb * state_block_size) * state_row_stride_words
    if OVERLAP:
        row_base += tl.where(rr >= M, HEAD_DIM, 0)
    off = row_base[:, None] + c[None, :]
    return off, (rs >= 0)[:, None] & cm[None, :]


@triton.jit
def _compressor_pool_kernel(
    state_ptr, row_slots_ptr, entry_slot_ptr, pooled_ptr, state_block_size, state_row_stride_words,
    state_page_words, R: tl.constexpr, M: tl.constexpr, OVERLAP: tl.constexpr, WIDTH: tl.constexpr,
    HEAD_DIM: tl.constexpr, CHUNK_R: tl.constexpr, BLOCK_C: tl.constexpr, ROUND_BF16: tl.constexpr,
    PDL: tl.constexpr = False,  # early start: kernels/early_start.py
):
    """pooled[t, c] = fp32(sum_r softmax_r(z[r, c]) * a[r, c]) for the BLOCK_C channels of this
    program, BF16-rounded if ROUND_BF16; tokens that complete no entry (entry_slot[t] < 0) return
    at once and leave their row unwritten (the insert kernel skips them too)."""
    wait_for_previous(PDL)  # before any load or store (kernels/early_start.py)
    t = tl.program_id(0)
    if tl.load(entry_slot_ptr + t) >= 0:
        c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
        cm = c < HEAD_DIM
        zmax = tl.full([BLOCK_C], float("-inf"), tl.float64)
        for r0 in range(0, R, CHUNK_R):
            off, m = _chunk_offsets(row_slots_ptr, t, r0, c, cm, state_block_size, state_row_stride_words,
                                    state_page_words, R, M, OVERLAP, HEAD_DIM, CHUNK_R)
            z = tl.load(state_ptr + off + WIDTH, mask=m, other=float("-inf")).to(tl.float64)
            zmax = tl.maximum(zmax, tl.max(z, axis=0))
        # channels past HEAD_DIM (masked, never stored) get max 0 and sum 1: no -inf - -inf, no 0 / 0
        zmax = tl.where(cm, zmax, 0.0)
        denom = tl.zeros([BLOCK_C], tl.float64)
        for r0 in range(0, R, CHUNK_R):
            off, m = _chunk_offsets(row_slots_ptr, t, r0, c, cm, state_block_size, state_row_stride_words,
                                    state_page_words, R, M, OVERLAP, HEAD_DIM, CHUNK_R)
            z = tl.load(state_ptr + off + WIDTH, mask=m, other=float("-inf")).to(tl.float64)
            denom += tl.sum(tl.exp(z - zmax[None, :]), axis=0)
        denom = tl.where(cm, denom, 1.0)
        acc = tl.zeros([BLOCK_C], tl.float64)
        for r0 in range(0, R, CHUNK_R):
            off, m = _chunk_offsets(row_slots_ptr, t, r0, c, cm, state_block_size, state_row_stride_words,
                                    state_page_words, R, M, OVERLAP, HEAD_DIM, CHUNK_R)
            z = tl.load(state_ptr + off + WIDTH, mask=m, other=float("-inf")).to(tl.float64)
            a = tl.load(state_ptr + off, mask=m, other=0.0).to(tl.float64)
            weights = tl.exp(z - zmax[None, :]) / denom[None, :]  # softmax first, then the weighted sum
            acc += tl.sum(weights * a, axis=0)
        pooled = acc.to(tl.float32)
        if ROUND_BF16:
            pooled = round_bf16(pooled)
        tl.store(pooled_ptr + t * HEAD_DIM + c, pooled, mask=cm)
