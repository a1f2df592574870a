"""Private Triton kernel of the tie-broken top-k; launched only through `topk/triton.py`.

One program per row, the whole row in registers. Ranking key = (score, then lower index): the
score's fp32 bits mapped to a monotone signed int32 (-0.0 folded into +0.0, so they tie as the
twin's float compare does). Selection is exact and sort-free:
1. threshold: the kk-th largest key among valid candidates (kk = min(k, #valid)) by a 32-step
   bitwise descent on the order-preserving unsigned key, each step one count over the row;
2. select every key above it, and of the keys equal to it the lowest-index ones (a prefix sum
   over the tie flags) until kk are taken;
3. order: the kk winners are compacted into the output row as 64-bit (key, ~index) words, read
   back and sorted descending (bitonic, kk <= BLOCK_OUT), which is "score desc, index asc" —
   the twin's order, so the indices are identical, not merely the same set.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit(do_not_specialize=['k'])  # run-time sizes: one compile for every value
def _topk_kernel(
    scores_ptr, mask_ptr, num_valid_ptr, out_ptr, C, k, stride_s, stride_m, stride_o,
    HAS_MASK: tl.constexpr, HAS_NUM: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_OUT: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_C)
    in_row = cols < C
    s = tl.load(scores_ptr + row * stride_s + cols, mask=in_row, other=0.0).to(tl.float32)
    valid = in_row
    if HAS_NUM:
        valid = valid & (cols < tl.load(num_valid_ptr + row))
    if HAS_MASK:
        valid = valid & (tl.load(mask_ptr + row * stride_m + cols, mask=in_row, other=0) != 0)
    bits = (s + 0.0).to(tl.int32, bitcast=True)  # -0.0 + 0.0 = +0.0
    key = tl.where(bits >= 0, bits, bits ^ 0x7FFFFFFF)  # monotone signed int32
    u = (key ^ -2147483648).to(tl.uint32, bitcast=True)  # monotone unsigned
    kk = tl.minimum(k, tl.sum(valid.to(tl.int32), axis=0))
    t = tl.full([], 0, tl.uint32)
    bit = tl.full([], 2147483648, tl.uint32)  # 2^31, halved each step
    for _ in range(32):
        cand = t | bit
        bit = bit >> 1
        cnt = tl.sum((valid & (u >= cand)).to(tl.int32), axis=0)
        t = tl.where(cnt >= kk, cand, t)
    gt = valid & (u > t)
    eq = valid & (u == t)
    need = kk - tl.sum(gt.to(tl.int32), axis=0)
    sel = gt | (eq & (tl.cumsum(eq.to(tl.int32), axis=0) <= need))
    pos = tl.cumsum(sel.to(tl.int32), axis=0) - 1
    low = tl.full([], 4294967295, tl.int64)  # 2^32 - 1
    word = (key.to(tl.int64) << 32) | (low - cols.to(tl.int64))
    tl.store(out_ptr + row * stride_o + pos, word, mask=sel)
    tl.debug_barrier()  # the compacted words are read back by other threads of this program
    j = tl.arange(0, BLOCK_OUT)
    words = tl.load(out_ptr + row * stride_o + j, mask=j < kk, other=tl.full([], -9223372036854775808, tl.int64))
    words = tl.sort(words, descending=True)
    idx = low - (words & low)
    tl.store(out_ptr + row * stride_o + j, tl.where(j < kk, idx, -1), mask=j < k)
