"""Private Triton kernels of the split-K sparse attention with sink; launched only through `triton.py`.

The fold, fixed by the slot lists' lengths and never by the batch: each source's slot list
(window, then compressed) is cut into chunks of BLOCK_K columns, in that order. A chunk's
partial is its own softmax state (`attend_chunk`: max m, sum l, accumulator acc = p . v). A
token's state is the left fold of its chunks' partials in ascending order, starting from the
first partial as it is; the sink then enters the denominator. Columns past a list's length and
slots -1 are no key; a chunk without any valid key has m = -1e30, l = 0, acc = 0 and leaves a
state that has seen a key unchanged (state * 1 + partial * exp(-1e30 - m) = state + 0), so
padding a list with -1 columns (the CUDA-graph decode batch) changes no output value. Each
program reads only its own token's data and the grid never changes a program's arithmetic, so
a token's output is the same bits alone or in any batch.

`_sparse_attention_kernel`: one program per (token, head block, chunk) writes the chunk's
partial to the workspace, part_acc [T, num_chunks, H, HEAD_DIM] and part_ml
[T, num_chunks, 2, H] (m then l), fp32. `_sparse_attention_combine_kernel`: one program per
(token, head block, channel block) folds them and writes the output. Even a decode batch of
one token gets num_chunks x heads/BLOCK_H programs (decode is latency-bound: issue 11).
"""

from __future__ import annotations

import triton
import triton.language as tl

from mxserve.kernels.early_start import wait_for_previous
from mxserve.kernels.sparse_attention._chunk_jit import attend_chunk, piece_mask, pv_piece


@triton.jit
def _store_pv(rows, p, k, hm, G: tl.constexpr, PIECE: tl.constexpr, HEAD_DIM: tl.constexpr, DOT: tl.constexpr):
    """Write channels of piece G of p . k to the rows (one per head) of this chunk's partial."""
    if G * PIECE < HEAD_DIM:
        c = G * PIECE + tl.arange(0, PIECE)
        tl.store(rows[:, None] + c[None, :], pv_piece(p, k, DOT), mask=piece_mask(hm, c, G, PIECE, HEAD_DIM))


# Run-time sizes: one compile for every list length (specializing a size equal to 1 or to a
# multiple of 16 would compile other code for some lengths), and the two sources' page numbers
# keep one type in both branches of the source choice. ALIGNED carries the alignment instead.
@triton.jit(do_not_specialize=["num_keys0", "stride_s0", "block_size0", "page_stride0", "num_keys1", "stride_s1",
                               "block_size1", "page_stride1", "num_chunks0", "num_chunks"])
def _sparse_attention_kernel(
    q_ptr, part_acc_ptr, part_ml_ptr,
    buf0, slots0_ptr, num_keys0, stride_s0, block_size0, page_stride0,
    buf1, slots1_ptr, num_keys1, stride_s1, block_size1, page_stride1,
    num_chunks0, num_chunks, H, scale, stride_qt, stride_qh,
    MODE: tl.constexpr, HEAD_DIM: tl.constexpr, DATA_BYTES: tl.constexpr, SCALE_BYTES: tl.constexpr,
    BLOCK_H: tl.constexpr, BLOCK_K: tl.constexpr, PIECE: tl.constexpr, DOT: tl.constexpr,
    Q_PIECES: tl.constexpr, ALIGNED: tl.constexpr, NATIVE_FP8: tl.constexpr,
    PDL: tl.constexpr = False,  # early start: kernels/early_start.py
):
    """One program = one token x BLOCK_H heads x one chunk (of source 0 if j < num_chunks0)."""
    wait_for_previous(PDL)  # before any load or store (kernels/early_start.py)
    t = tl.program_id(0).to(tl.int64)
    heads = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    j = tl.program_id(2)
    hm = heads < H
    q_rows = q_ptr + t * stride_qt + heads * stride_qh
    if j < num_chunks0:
        buf, slots_row, num_keys, block_size, page_stride = buf0, slots0_ptr + t * stride_s0, num_keys0, \
            block_size0, page_stride0
        k_start = j * BLOCK_K
    else:
        buf, slots_row, num_keys, block_size, page_stride = buf1, slots1_ptr + t * stride_s1, num_keys1, \
            block_size1, page_stride1
        k_start = (j - num_chunks0) * BLOCK_K
    m, l, p, k0, k1, k2, k3, k4, k5, k6, k7 = attend_chunk(
        q_rows, hm, buf, slots_row, k_start, num_keys, block_size, page_stride, scale, MODE, HEAD_DIM,
        DATA_BYTES, SCALE_BYTES, BLOCK_H, BLOCK_K, PIECE, DOT, Q_PIECES, ALIGNED, NATIVE_FP8)
    part = t * num_chunks + j
    rows = part_acc_ptr + (part * H + heads) * HEAD_DIM
    _store_pv(rows, p, k0, hm, 0, PIECE, HEAD_DIM, DOT)
    if PIECE < HEAD_DIM:
        _store_pv(rows, p, k1, hm, 1, PIECE, HEAD_DIM, DOT)
        _store_pv(rows, p, k2, hm, 2, PIECE, HEAD_DIM, DOT)
        _store_pv(rows, p, k3, hm, 3, PIECE, HEAD_DIM, DOT)
        _store_pv(rows, p, k4, hm, 4, PIECE, HEAD_DIM, DOT)
        _store_pv(rows, p, k5, hm, 5, PIECE, HEAD_DIM, DOT)
        _store_pv(rows, p, k6, hm, 6, PIECE, HEAD_DIM, DOT)
        _store_pv(rows, p, k7, hm, 7, PIECE, HEAD_DIM, DOT)
    ml = part_ml_ptr + part * 2 * H + heads
    tl.store(ml, m, mask=hm)
    tl.store(ml + H, l, mask=hm)


@triton.jit
def _merge_weights(m, m_c):
    """Running max after merging a partial of max m_c; the factors of the state and of the partial."""
    m_n = tl.maximum(m, m_c)
    return m_n, tl.exp(m - m_n), tl.exp(m_c - m_n)


@triton.jit
def _sink_factor(m, l, sink):
    """Output scale keep / (l * keep + exp(sink - m_f)): the sink only enlarges the denominator."""
    m_f = tl.maximum(m, sink)
    keep = tl.exp(m - m_f)
    return keep / tl.fma(l, keep, tl.exp(sink - m_f))


@triton.jit(do_not_specialize=["num_chunks"])
def _sparse_attention_combine_kernel(
    part_acc_ptr, part_ml_ptr, sink_ptr, out_ptr, num_chunks, H, stride_ot, stride_oh,
    HEAD_DIM: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr, NUM_STAGES: tl.constexpr,
    PDL: tl.constexpr = False,
):
    """One program = one token x BLOCK_H heads x BLOCK_D channels: fold the chunks, add the sink.
    No chunks at all (both lists empty): the sink takes all mass, output 0.

    PDL: launched as a programmatic dependent launch of the partial kernel (kernels/early_start.py),
    which lets it start once all its programs have; the program waits for the partial kernel to
    finish and its stores to be visible (`griddepcontrol.wait`) before its first load, so only the
    launch latency overlaps, never a read of the workspace. Same arithmetic, same bits."""
    wait_for_previous(PDL)
    t = tl.program_id(0).to(tl.int64)
    heads = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    cols = tl.program_id(2) * BLOCK_D + tl.arange(0, BLOCK_D)
    hm = heads < H
    cm = hm[:, None] & (cols < HEAD_DIM)[None, :]
    m = tl.full((BLOCK_H,), -1e30, dtype=tl.float32)
    l = tl.zeros((BLOCK_H,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_H, BLOCK_D), dtype=tl.float32)
    for j in tl.range(0, num_chunks, num_stages=NUM_STAGES):  # the loads do not depend on the fold
        part = t * num_chunks + j
        ml = part_ml_ptr + part * 2 * H + heads
        m_c = tl.load(ml, mask=hm, other=-1e30)
        l_c = tl.load(ml + H, mask=hm, other=0.0)
        acc_c = tl.load(part_acc_ptr + (part * H + heads[:, None]) * HEAD_DIM + cols[None, :], mask=cm, other=0.0)
        # state * a + partial * b, the rounding written out (explicit fma: no contraction left to the
        # compiler), from the first partial as it is
        first = j == 0
        m_n, wa, wb = _merge_weights(m, m_c)
        acc = tl.where(first, acc_c, tl.fma(acc, wa[:, None], acc_c * wb[:, None]))
        l = tl.where(first, l_c, tl.fma(l, wa, l_c * wb))
        m = tl.where(first, m_c, m_n)
    sink = tl.load(sink_ptr + heads, mask=hm, other=0.0).to(tl.float32)
    out = acc * _sink_factor(m, l, sink)[:, None]
    tl.store(out_ptr + t * stride_ot + heads[:, None] * stride_oh + cols[None, :], out, mask=cm)
