"""Private Triton kernel of the tie-broken top-k (radix bounds + compaction + sort or rank);
launched only through `topk/triton.py`.

Ranking key per candidate: an unsigned 32-bit `v` whose ascending order is the ranking order
(higher score first); the fp32 bits map to it monotonically, -0.0 folded into +0.0 (the two
zeros tie, as the twin's float compare does), and a non-candidate (masked, past num_valid,
outside the row) gets v = 0xFFFFFFFF, which no fp32 bit pattern maps to. Ties on v are broken by
the lower index, so (v, index) orders candidates exactly as the twin does. A NaN (which the
twin rejects) ranks by its bits: +NaN above +inf, -NaN below -inf; no error, no host sync.

A program holds its whole row in registers and works in three steps:
1. bounds (rows with more candidates than CAP): a radix select on v - v_min with 64 bins per
   level (`tl.histogram`), first in 1/8-octave bins below the row's best score, then each level
   splitting the threshold bin 64 ways, until at most CAP candidates lie below the upper bound
   `hi`, or the threshold bin holds one value (ties). Candidates below `lo` are sure winners.
   Any bin width is exact (bins are a monotone function of v); the widths only set how many
   levels a row needs (one for smooth score distributions, at most seven).
2. compaction: the set S = {v < lo} plus {lo <= v < hi} (all of it, or in the tie case its
   lowest-index `kk - #{v < lo}` members) is a superset of the top-kk that contains everything
   ranked above any of its members, so ranking S ranks the winners. One prefix sum over the row
   gives every member its slot; S's indices go to this program's scratch in index order (the
   order step reloads their scores: keeping v live through the scan would spill).
3. order: either one program sorts S as 64-bit (v, index) words (RANK=False), or each of the P
   programs of the row counts, for its slice of S, the members ranked before each element and
   writes index -> out[rank] (RANK=True; P programs repeat steps 1-2 on their own copy, which at
   small batch costs idle SMs and saves the sort). Both give exactly the twin's order.
The kernel writes every output slot (-1 past the winners), so `out` needs no fill.
"""

from __future__ import annotations

import triton
import triton.language as tl

from mxserve.kernels.early_start import wait_for_previous

NOT_CANDIDATE = tl.constexpr(0xFFFFFFFF)  # v of a masked/missing candidate; any fp32 maps below it
NUM_BINS = tl.constexpr(64)  # histogram bins per radix level (6 bits)
FIRST_SHIFT = tl.constexpr(20)  # level-1 bin width 2^20 in v = 1/8 octave of the score (2^23 per octave)
CATCH_ALL_SHIFT = tl.constexpr(26)  # the level-1 catch-all spans up to 2^32: 64 bins of 2^26 cover it


@triton.jit
def _order_key(s):
    """uint32 of an fp32 score: ascending = higher score first; never NOT_CANDIDATE."""
    bits = s.to(tl.int32, bitcast=True)
    sign = bits >> 31  # 0 or -1
    # positive: flip the magnitude bits so larger -> smaller; negative: the raw bits already grow
    # with the magnitude and sit above every positive one, minus 1 so -0.0 lands on +0.0's key
    # (the two zeros tie; integer-only, so no fast-math flag can fold it away)
    return ((bits ^ (0x7FFFFFFF & ~sign)) + sign).to(tl.uint32, bitcast=True)


@triton.jit
def _order_keys(scores_ptr, mask_ptr, num_valid_ptr, row, C, stride_s, stride_m, cols,
                HAS_MASK: tl.constexpr, HAS_NUM: tl.constexpr):
    """(uint32 [BLOCK] keys, NOT_CANDIDATE where not selectable; int32 number of candidates)."""
    valid = cols < C
    s = tl.load(scores_ptr + row * stride_s + cols, mask=valid, other=0.0).to(tl.float32)
    n_valid = C
    if HAS_NUM:
        n_valid = tl.maximum(tl.minimum(tl.load(num_valid_ptr + row), C), 0).to(tl.int32)  # int32 or int64
        valid = valid & (cols < n_valid)
    if HAS_MASK:
        valid = valid & (tl.load(mask_ptr + row * stride_m + cols, mask=valid, other=0) != 0)
        n_valid = tl.sum(valid.to(tl.int32), axis=0)
    return tl.where(valid, _order_key(s), tl.full([], NOT_CANDIDATE, tl.uint32)), n_valid


@triton.jit
def _candidate_bounds(v, kk, n_valid, CAP: tl.constexpr):
    """(lo, hi, n_lo, n_hi): n_lo = #{v < lo} < kk <= n_hi = #{v < hi}, and n_hi <= CAP unless
    hi - lo <= 1 (the threshold bin holds a single value). int64 lo/hi, int32 counts."""
    lo = tl.min(v, axis=0).to(tl.int64)  # the best candidate's v
    hi = tl.full([], NOT_CANDIDATE, tl.int64)
    n_lo = tl.full([], 0, tl.int32)
    n_hi = n_valid
    shift = tl.full([], FIRST_SHIFT, tl.int32)
    first = tl.full([], 1, tl.int32)
    bins = tl.arange(0, NUM_BINS)
    while (n_hi > CAP) & (hi - lo > 1):
        lo32 = lo.to(tl.uint32)
        d = tl.minimum((v - lo32) >> shift.to(tl.uint32), NUM_BINS - 1).to(tl.int32)
        d = tl.where(v < lo32, 0, d)  # sure winners count into bin 0 (they are below every bin)
        d = tl.where(v >= hi.to(tl.uint32), NUM_BINS - 1, d)  # excluded ones into the last bin
        hist = tl.histogram(d, NUM_BINS)
        cum = tl.cumsum(hist, axis=0)
        b = tl.sum((cum < kk).to(tl.int32), axis=0)  # the bin holding the kk-th candidate
        catch_all = b == NUM_BINS - 1
        n_lo = tl.sum(tl.where(bins < b, hist, 0), axis=0)
        n_hi = tl.where(catch_all, n_hi, tl.sum(tl.where(bins <= b, hist, 0), axis=0))
        hi = tl.where(catch_all, hi, tl.minimum(lo + ((b + 1).to(tl.int64) << shift.to(tl.int64)), hi))
        lo = lo + (b.to(tl.int64) << shift.to(tl.int64))
        # the bins partition [lo, lo + 64 << shift): the chosen bin is 2^shift wide, 64 bins of
        # 2^(shift - 6) split it; only level 1's catch-all is wider (up to 2^32)
        shift = tl.where((first == 1) & catch_all, CATCH_ALL_SHIFT, tl.maximum(shift - 6, 0))
        first = first * 0
    return lo, hi, n_lo, n_hi


@triton.jit
def _popcount(x):
    """Set bits of a uint32 (the SWAR idiom: LLVM lowers it to one POPC)."""
    x = x - ((x >> 1) & 0x55555555)
    x = (x & 0x33333333) + ((x >> 2) & 0x33333333)
    x = (x + (x >> 4)) & 0x0F0F0F0F
    return ((x * 0x01010101) >> 24).to(tl.int32)


@triton.jit
def _prefix_count(flag, cols):
    """int32 [G, 32]: #{j <= i : flag[j]} over the row-major flattening (inclusive, index order);
    cols [G, 32] = the flat indices, in flag's layout. tl.cumsum over a 16384-row costs ~47
    instructions per element (a shuffle scan per element, every thread walking every warp's
    partial); here each group of 32 folds into a bit mask, only the G group counts are scanned,
    and a popcount of the lower bits finishes. Callers keep the [G, 32] shape and derive the lane
    from cols, not a fresh arange: either would make Triton move the row through shared memory."""
    lane = (cols & 31).to(tl.uint32)
    bits = tl.sum(flag.to(tl.uint32) << lane, axis=1)  # distinct bits: the sum is an or
    count = _popcount(bits)
    before = tl.cumsum(count, axis=0) - count
    upto = bits[:, None] & (tl.full([], 0xFFFFFFFF, tl.uint32) >> (31 - lane))
    return before[:, None] + _popcount(upto)


@triton.jit
def _compact(v, cols, lo, hi, n_lo, n_hi, kk, si_ptr, BLOCK: tl.constexpr, CAP: tl.constexpr):
    """Write the indices of S (see the module docstring) in index order to si; returns |S|
    (<= CAP). Only indices: v is not live past the flags (it would spill at 16384 per row)."""
    v = tl.reshape(v, [BLOCK // 32, 32])
    cols = tl.reshape(cols, [BLOCK // 32, 32])  # reshaped like v: same layout, no conversion
    take = v < hi.to(tl.uint32)  # = below lo, or in the threshold bin [lo, hi)
    n_s = n_hi
    if n_hi > CAP:  # the threshold bin is one tied value: only its lowest-index kk - n_lo members
        lo32 = lo.to(tl.uint32)
        in_bin = take & (v >= lo32)
        take = (v < lo32) | (in_bin & (_prefix_count(in_bin, cols) <= kk - n_lo))
        n_s = kk
    tl.store(si_ptr + _prefix_count(take, cols) - 1, cols, mask=take)
    tl.debug_barrier()  # S is read back by other threads of this program
    return n_s


@triton.jit
def _sort_and_store(v, idx, out_ptr, k, kk, N: tl.constexpr, BLOCK_K: tl.constexpr):
    """Sort N (v, idx) pairs as int64 words (ascending = best first) and write out[0:k]."""
    key = (v ^ 0x80000000).to(tl.int32, bitcast=True)  # ascending v as a signed int32
    word = tl.sort((key.to(tl.int64) << 32) | idx.to(tl.int64))
    j = tl.arange(0, N)
    tl.store(out_ptr + j, tl.where(j < kk, word & 0xFFFFFFFF, -1), mask=j < k)
    jj = tl.arange(0, BLOCK_K)
    tl.store(out_ptr + jj, tl.full([BLOCK_K], -1, tl.int64), mask=(jj >= N) & (jj < k))


@triton.jit
def _member_keys(srow_ptr, si_ptr, j, n_s):
    """(index, v) of S members j (NOT_CANDIDATE past |S|): v recomputed from the score row."""
    has = j < n_s
    idx = tl.load(si_ptr + j, mask=has, other=0)
    s = tl.load(srow_ptr + idx, mask=has, other=0.0).to(tl.float32)
    return idx, tl.where(has, _order_key(s), tl.full([], NOT_CANDIDATE, tl.uint32))


@triton.jit
def _rank_and_store(si_ptr, sv_ptr, n_s, out_ptr, k, kk, part,
                    BI: tl.constexpr, BJ: tl.constexpr, BLOCK_K: tl.constexpr):
    """Slice `part` of S (BI members): rank = #{members ranked before it}; out[rank] = its index.

    Sub-slices of RB <= 16 members at a time against blocks of BJ = 32 x num_warps members: the
    [RB, BJ] tile is meant to put one member j per thread and the RB sub-slice members in every
    thread's registers (RB counters + RB keys: more would spill at 16 warps), so a pair costs a
    compare and an add, and the counts are summed across threads once per sub-slice. S is in
    index order, so a member j before the sub-slice wins a tie (counted when v_j <= v_i), one
    after it loses it (v_j < v_i), and only the block overlapping it needs the position compare."""
    RB: tl.constexpr = BI if BI < 16 else 16
    for sub in range(0, BI, RB):
        i0 = part * BI + sub
        i = i0 + tl.arange(0, RB)
        vi = tl.load(sv_ptr + i, mask=i < n_s, other=-1).to(tl.uint32, bitcast=True)  # -1: NOT_CANDIDATE
        before = tl.zeros([RB, BJ], tl.int32)
        for j0 in range(0, n_s, BJ):
            j = j0 + tl.arange(0, BJ)
            vj = tl.load(sv_ptr + j, mask=j < n_s, other=-1).to(tl.uint32, bitcast=True)
            if j0 + BJ <= i0:
                before += (vj[None, :] <= vi[:, None]).to(tl.int32)
            elif j0 >= i0 + RB:
                before += (vj[None, :] < vi[:, None]).to(tl.int32)
            else:
                tie_won = (vj[None, :] == vi[:, None]) & (j[None, :] < i[:, None])
                before += ((vj[None, :] < vi[:, None]) | tie_won).to(tl.int32)
        rank = tl.sum(before, axis=1)
        idx = tl.load(si_ptr + i, mask=i < n_s, other=0)
        tl.store(out_ptr + rank, idx.to(tl.int64), mask=(i < n_s) & (rank < k))
    if part == 0:
        jj = tl.arange(0, BLOCK_K)
        tl.store(out_ptr + jj, tl.full([BLOCK_K], -1, tl.int64), mask=(jj >= kk) & (jj < k))


@triton.jit(do_not_specialize=["k"])  # run-time k: one compile for every value
def _topk_select_kernel(
    scores_ptr, mask_ptr, num_valid_ptr, out_ptr, scratch_ptr, C, k, stride_s, stride_m, stride_o,
    HAS_MASK: tl.constexpr, HAS_NUM: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_K: tl.constexpr,
    CAP: tl.constexpr, P: tl.constexpr, RANK: tl.constexpr, BJ: tl.constexpr,
    PDL: tl.constexpr = False,  # early start: kernels/early_start.py
):
    wait_for_previous(PDL)  # before any load or store (kernels/early_start.py)
    row = tl.program_id(0).to(tl.int64)
    part = tl.program_id(1)
    cols = tl.arange(0, BLOCK_C)
    v, n_valid = _order_keys(scores_ptr, mask_ptr, num_valid_ptr, row, C, stride_s, stride_m, cols,
                             HAS_MASK, HAS_NUM)
    kk = tl.minimum(k, n_valid)
    out_row = out_ptr + row * stride_o
    if BLOCK_C <= CAP and not RANK:
        _sort_and_store(v, cols, out_row, k, kk, BLOCK_C, BLOCK_K)  # the row is S: sort it in place
    else:
        lo = tl.full([], 0, tl.int64)
        hi = tl.full([], NOT_CANDIDATE, tl.int64)
        n_lo = tl.full([], 0, tl.int32)
        n_hi = n_valid
        if BLOCK_C > CAP:
            lo, hi, n_lo, n_hi = _candidate_bounds(v, kk, n_valid, CAP)
        si_ptr = scratch_ptr + (row * P + part) * (2 * CAP)
        n_s = _compact(v, cols, lo, hi, n_lo, n_hi, kk, si_ptr, BLOCK_C, CAP)
        si, sv = _member_keys(scores_ptr + row * stride_s, si_ptr, tl.arange(0, CAP), n_s)
        if RANK:
            sv_ptr = si_ptr + CAP
            tl.store(sv_ptr + tl.arange(0, CAP), sv.to(tl.int32, bitcast=True))
            tl.debug_barrier()  # every thread reads every member's key
            _rank_and_store(si_ptr, sv_ptr, n_s, out_row, k, kk, part, CAP // P, BJ, BLOCK_K)
        else:
            _sort_and_store(sv, si, out_row, k, kk, CAP, BLOCK_K)
