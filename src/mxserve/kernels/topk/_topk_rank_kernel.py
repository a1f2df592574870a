"""Private Triton kernel of the tie-broken top-k in rank form (session 7, issue 11); launched only
through `topk/triton.py`.

Same ranking key as the select kernel (`_topk_select_kernel._order_key`): an unsigned 32-bit `v`
whose ascending order is the ranking order, -0.0 folded into +0.0, NOT_CANDIDATE (0xFFFFFFFF) for
a masked or missing candidate, ties broken by the lower index. A NaN ranks by its bits.

Where the select kernel's time went (session 5, H200): one program per row did all the
per-candidate work (~110 instructions per candidate at 16384: a 64-bin histogram per radix level,
the compaction, a gather of the winners' scores), then either a `tl.sort` (5-6 us for 1024 words
at one row per SM) or a rank count that reduced across 512 threads for every 16 members. Here:

1. candidates S, in index order:
   - FULL (rows of at most CAP candidates): S is the row itself; nothing is compacted and the
     rank step reads the scores directly (one memory round trip per program).
   - SELECT: one pass over the row in registers finds an upper bound `hi` with
     kk <= #{v < hi} <= CAP from a strided SAMPLE (1/SAMPLE of the row, one 64-bin histogram in
     1/8-octave bins below the sample's best, MARGIN sample members of slack) and checks it with
     one count over the row: ~2 instructions a candidate instead of a histogram's ~26. When the
     check fails (ties, odd distributions, a small sample) the select kernel's exact radix bounds
     run instead (`_candidate_bounds`, same result contract). S = {v < hi}, or in the tie case
     {v < lo} plus the lowest-index members of the one tied value, goes to the row's scratch as
     (index, key) pairs by one prefix count. Every program of the row writes the same S to the
     same place (identical values, so the copies race harmlessly) and reads it back after its
     own barrier.
2. ranks: program `part` of P takes its share of S (positions, in index order) and counts, for
   each member i, the members of S ranked before it: rank_i = #{j : v_j < v_i} + #{j < i :
   v_j == v_i}; a member with rank < kk writes its index to out[rank]. The count runs over S in
   chunks of JB positions against MB members at a time, one [MB, JB] tile per chunk, summed once
   per MB members. A chunk wholly before the members counts v_j <= v_i, one wholly after counts
   v_j < v_i (one compare a pair); only the chunk holding the members compares positions too.
   FLOAT: when every winner lies within SPAN_F of the row's best key, keys relative to it are
   exact fp32 integers and a pair costs one saturating add and one add on the FMA pipe
   (`min(max(b_i - f_j, 0), 1)` is FADD.SAT on sm_90; b_i = f_i + 1 for "<=", f_i for "<"),
   about 2.5x the integer compare's throughput. Otherwise (a wider span) the integer path runs;
   the choice is per row at run time and both are exact.
The kernel writes every output slot (-1 past the winners), so `out` needs no fill.
"""

from __future__ import annotations

import triton
import triton.language as tl

from mxserve.kernels.topk._topk_select_kernel import (
    FIRST_SHIFT,
    NOT_CANDIDATE,
    NUM_BINS,
    _candidate_bounds,
    _order_key,
    _prefix_count,
)

# keys within SPAN_F of the row's best are exact fp32 integers with room for the +1 of "<=" and
# a clamp value above them (all below 2^24)
SPAN_F = tl.constexpr(16777212)


@triton.jit
def _keys_at(scores_ptr, mask_ptr, row, n_num, stride_s, stride_m, cols, HAS_MASK: tl.constexpr):
    """uint32 keys at `cols` (any shape); NOT_CANDIDATE at cols >= n_num (past the row or its
    num_valid) or where the mask is off."""
    ok = cols < n_num
    s = tl.load(scores_ptr + row * stride_s + cols, mask=ok, other=0.0).to(tl.float32)
    if HAS_MASK:
        ok = ok & (tl.load(mask_ptr + row * stride_m + cols, mask=ok, other=0) != 0)
    return tl.where(ok, _order_key(s), tl.full([], NOT_CANDIDATE, tl.uint32))


@triton.jit
def _sample_bound(scores_ptr, mask_ptr, row, n_num, stride_s, stride_m, v, kk,
                  HAS_MASK: tl.constexpr, BLOCK_C: tl.constexpr, SAMPLE: tl.constexpr,
                  MARGIN: tl.constexpr, CAP: tl.constexpr):
    """(hi int64, n_hi int32, ok): hi = a bin edge of a histogram of every SAMPLE-th key, the
    first whose sample count reaches kk / SAMPLE + MARGIN; n_hi = #{v < hi} over the row; ok when
    kk <= n_hi <= CAP (then S = {v < hi} holds the winners). Invalid samples count in the
    catch-all bin, which is never chosen."""
    vs = _keys_at(scores_ptr, mask_ptr, row, n_num, stride_s, stride_m,
                  tl.arange(0, BLOCK_C // SAMPLE) * SAMPLE, HAS_MASK)
    lo_s = tl.min(vs, axis=0)
    d = tl.minimum((vs - lo_s) >> FIRST_SHIFT, NUM_BINS - 1).to(tl.int32)
    d = tl.where(vs == NOT_CANDIDATE, NUM_BINS - 1, d)
    cum = tl.cumsum(tl.histogram(d, NUM_BINS), axis=0)
    need = (kk + SAMPLE - 1) // SAMPLE + MARGIN
    b = tl.sum((cum < need).to(tl.int32), axis=0)
    hi = tl.minimum(lo_s.to(tl.int64) + ((b + 1).to(tl.int64) << FIRST_SHIFT), NOT_CANDIDATE)
    n_hi = tl.sum((v < hi.to(tl.uint32)).to(tl.int32), axis=0)
    return hi, n_hi, (b < NUM_BINS - 1) & (n_hi >= kk) & (n_hi <= CAP)


@triton.jit
def _compact(v, cols, lo, hi, n_lo, n_hi, kk, si_ptr, BLOCK: tl.constexpr, CAP: tl.constexpr):
    """Write S's indices to si in index order; returns |S| (<= CAP). S = {v < hi}, or when
    n_hi > CAP (the bin [lo, hi) is one tied value) {v < lo} plus its lowest-index kk - n_lo
    members. Only indices: storing the keys too keeps v live through the prefix count and spills
    at 32 keys a thread (the rank step gathers the scores instead)."""
    v = tl.reshape(v, [BLOCK // 32, 32])
    cols = tl.reshape(cols, [BLOCK // 32, 32])  # reshaped like v: same layout, no conversion
    take = v < hi.to(tl.uint32)
    n_s = n_hi
    if n_hi > CAP:
        lo32 = lo.to(tl.uint32)
        in_bin = take & (v >= lo32)
        take = (v < lo32) | (in_bin & (_prefix_count(in_bin, cols) <= kk - n_lo))
        n_s = kk
    tl.store(si_ptr + _prefix_count(take, cols) - 1, cols, mask=take)
    tl.debug_barrier()  # S is read back by every thread of this program
    return n_s


@triton.jit
def _s_at(scores_ptr, mask_ptr, si_ptr, row, n_num, n_j, stride_s, stride_m, j,
          HAS_MASK: tl.constexpr, FROM_ROW: tl.constexpr):
    """(row index, key) of S's members at positions j: the row itself (FULL), or S's compacted
    index and the score gathered from the row; NOT_CANDIDATE past S."""
    if FROM_ROW:
        idx = j
        vj = _keys_at(scores_ptr, mask_ptr, row, n_num, stride_s, stride_m, j, HAS_MASK)
    else:
        has = j < n_j
        idx = tl.load(si_ptr + j, mask=has, other=0)
        s = tl.load(scores_ptr + row * stride_s + idx, mask=has, other=0.0).to(tl.float32)
        vj = tl.where(has, _order_key(s), tl.full([], NOT_CANDIDATE, tl.uint32))
    return idx, vj


@triton.jit
def _count_float(vjs, vi, i, vb, jb, vmin, m0, NJ: tl.constexpr, JB: tl.constexpr, MB: tl.constexpr):
    """int32 [MB]: ranks of the members with keys vi (column vector, positions i) among the chunks
    vjs and the block's own keys vb (row vector, positions jb), in exact fp32 integers
    d = min(v - vmin, SPAN_F + 1): a pair is one saturating add and one add."""
    di = tl.minimum(vi - vmin, SPAN_F).to(tl.float32)
    bi = di + 1.0
    acc = tl.zeros([MB, JB], tl.float32)
    for c in tl.static_range(NJ):
        j = c * JB + tl.arange(0, JB)[None, :]
        dj = tl.minimum(vjs[c] - vmin, SPAN_F + 1).to(tl.float32)
        aj = tl.where(j < m0, dj, tl.where(j < m0 + MB, 3.0e7, dj + 1.0))  # 3e7 > any bi: never counted
        acc += tl.minimum(tl.maximum(bi - aj, 0.0), 1.0)
    # the block: i counts j when d_j < d_i + [j < i]
    dj = tl.minimum(vb - vmin, SPAN_F + 1).to(tl.float32)
    earlier = tl.minimum(tl.maximum((i - jb).to(tl.float32), 0.0), 1.0)
    diag = tl.minimum(tl.maximum(di - dj + earlier, 0.0), 1.0)
    return (tl.sum(acc, axis=1) + tl.sum(diag, axis=1)).to(tl.int32)


@triton.jit
def _count_int(vjs, vi, i, vb, jb, m0, NJ: tl.constexpr, JB: tl.constexpr, MB: tl.constexpr):
    """int32 [MB]: as `_count_float`, on the uint32 keys (any span): a_j < v_i + 1 (v_i + 1 does
    not wrap for a valid member; NOT_CANDIDATE columns never count)."""
    bi = vi + 1
    acc = tl.zeros([MB, JB], tl.int32)
    for c in tl.static_range(NJ):
        j = c * JB + tl.arange(0, JB)[None, :]
        vj = vjs[c]
        aj = tl.where((j >= m0) & (j < m0 + MB), NOT_CANDIDATE, tl.where(j < m0, vj, vj + 1))
        aj = tl.where(vj == NOT_CANDIDATE, NOT_CANDIDATE, aj)
        acc += (aj < bi).to(tl.int32)
    diag = (vb < vi) | ((vb == vi) & (jb < i))
    return tl.sum(acc, axis=1) + tl.sum(diag.to(tl.int32), axis=1)


@triton.jit
def _rank_members(scores_ptr, mask_ptr, si_ptr, out_row, row, n_num, n_j, kk, vmin, use_float,
                  m0, m_hi, stride_s, stride_m, HAS_MASK: tl.constexpr, FROM_ROW: tl.constexpr,
                  FLOAT: tl.constexpr, NJ: tl.constexpr, JB: tl.constexpr, MB: tl.constexpr):
    """Ranks of S's members at positions m0 .. m0 + MB (< m_hi) among S; out[rank] = index for the
    winners (rank < kk). See the module docstring, step 2.

    Per column j the key is adjusted once for all MB members (a thread holds many members of one
    column): a_j = v_j before the block (the member wins ties: counted when v_j <= v_i, i.e.
    a_j < v_i + 1), v_j + 1 after it (counted when v_j < v_i), and "never" inside the block, whose
    pairs are counted exactly, with positions, in one [MB, MB] tile."""
    mi = m0 + tl.arange(0, MB)
    idx, vi1 = _s_at(scores_ptr, mask_ptr, si_ptr, row, n_num, n_j, stride_s, stride_m, mi, HAS_MASK, FROM_ROW)
    vjs = ()  # every chunk's loads first: their latencies overlap
    for c in tl.static_range(NJ):
        j = c * JB + tl.arange(0, JB)[None, :]
        vjs = vjs + (_s_at(scores_ptr, mask_ptr, si_ptr, row, n_num, n_j, stride_s, stride_m, j, HAS_MASK,  # noqa: RUF005 (Triton has no starred tuples)
                           FROM_ROW)[1],)
    i = mi[:, None]
    vi = vi1[:, None]
    jb = mi[None, :]  # the block's own positions and keys as columns
    vb = vi1[None, :]
    ok = (mi < m_hi) & (vi1 != NOT_CANDIDATE)
    if FLOAT:
        if use_float:
            rank = _count_float(vjs, vi, i, vb, jb, vmin, m0, NJ, JB, MB)
            ok = ok & (vi1 - vmin <= SPAN_F)  # members past the span are not winners (use_float's condition)
        else:
            rank = _count_int(vjs, vi, i, vb, jb, m0, NJ, JB, MB)
    else:
        rank = _count_int(vjs, vi, i, vb, jb, m0, NJ, JB, MB)
    tl.store(out_row + rank, idx.to(tl.int64), mask=ok & (rank < kk))


@triton.jit(do_not_specialize=["k"])  # run-time k: one compile for every value
def _topk_rank_kernel(
    scores_ptr, mask_ptr, num_valid_ptr, out_ptr, scratch_ptr, C, k, stride_s, stride_m, stride_o,
    HAS_MASK: tl.constexpr, HAS_NUM: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_K: tl.constexpr,
    CAP: tl.constexpr, P: tl.constexpr, SELECT: tl.constexpr, SAMPLE: tl.constexpr, MARGIN: tl.constexpr,
    MB: tl.constexpr, JB: tl.constexpr, FLOAT: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    part = tl.program_id(1)
    n_num = C
    if HAS_NUM:
        n_num = tl.maximum(tl.minimum(tl.load(num_valid_ptr + row), C), 0).to(tl.int32)  # int32 or int64
    si_ptr = scratch_ptr + row * CAP
    vmin = tl.full([], 0, tl.uint32)
    use_float = n_num < 0  # False, as a run-time scalar
    if SELECT:
        cols = tl.arange(0, BLOCK_C)
        v = _keys_at(scores_ptr, mask_ptr, row, n_num, stride_s, stride_m, cols, HAS_MASK)
        n_valid = n_num
        if HAS_MASK:
            n_valid = tl.sum((v != NOT_CANDIDATE).to(tl.int32), axis=0)
        kk = tl.minimum(k, n_valid)
        lo = tl.full([], 0, tl.int64)
        hi = tl.full([], NOT_CANDIDATE, tl.int64)
        n_lo = tl.full([], 0, tl.int32)
        n_hi = n_valid
        if n_valid > CAP:
            ok = n_valid < 0  # False, as a run-time scalar
            if SAMPLE > 0:
                hi, n_hi, ok = _sample_bound(scores_ptr, mask_ptr, row, n_num, stride_s, stride_m, v, kk,
                                             HAS_MASK, BLOCK_C, SAMPLE, MARGIN, CAP)
            if not ok:
                lo, hi, n_lo, n_hi = _candidate_bounds(v, kk, n_valid, CAP)
        if FLOAT:
            vmin = tl.min(v, axis=0)
            # S's keys are below hi, so within hi - 1 - vmin of the best; NOT_CANDIDATE must stay
            # past the span: NOT_CANDIDATE - vmin > SPAN_F + 1
            use_float = (hi - 1 - vmin.to(tl.int64) <= SPAN_F) & (vmin < NOT_CANDIDATE - SPAN_F - 2)
        n_j = _compact(v, cols, lo, hi, n_lo, n_hi, kk, si_ptr, BLOCK_C, CAP)
        NJ: tl.constexpr = CAP // JB
    else:
        n_j = n_num
        kk = tl.minimum(k, n_num)
        if HAS_MASK:
            v = _keys_at(scores_ptr, mask_ptr, row, n_num, stride_s, stride_m, tl.arange(0, BLOCK_C), HAS_MASK)
            kk = tl.minimum(k, tl.sum((v != NOT_CANDIDATE).to(tl.int32), axis=0))
        NJ: tl.constexpr = BLOCK_C // JB
    out_row = out_ptr + row * stride_o
    # -- this program's members: an equal share of S's positions, in blocks of MB ----------------
    share = tl.cdiv(tl.cdiv(n_j, P), MB) * MB
    m_lo = part * share
    m_hi = tl.minimum(m_lo + share, n_j)
    for m0 in range(m_lo, m_hi, MB):
        _rank_members(scores_ptr, mask_ptr, si_ptr, out_row, row, n_num, n_j, kk, vmin, use_float,
                      m0, m_hi, stride_s, stride_m, HAS_MASK, not SELECT, FLOAT and SELECT, NJ, JB, MB)
    if part == 0:
        jj = tl.arange(0, BLOCK_K)
        tl.store(out_row + jj, tl.full([BLOCK_K], -1, tl.int64), mask=(jj >= kk) & (jj < k))
