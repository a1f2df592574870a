"""Private Triton kernel of the rank top-k, first launch for long rows (session 7, issue 11): the
candidate set S of each row, compacted in index order, with each member's rank key. Launched only
through `topk/triton.py`; `_topk_rank_kernel.py` ranks S.

Keys as in `_topk_select_kernel._order_key`: uint32 `v`, ascending = ranking order, -0.0 folded
into +0.0, NOT_CANDIDATE (0xFFFFFFFF) for a masked or missing candidate, ties broken by the
lower index; a NaN ranks by its bits.

S is an upper set of the row that holds the top kk = min(k, #valid): {v < hi} with
kk <= |S| <= CAP, or (ties) {v < lo} plus the lowest-index kk - #{v < lo} candidates of the one
tied value lo. Its bound comes from a sample (every SAMPLE-th key, one 64-bin histogram in
1/8-octave bins below the sample's best): the bin edge where the sample count reaches
kk / SAMPLE - BACK, and the EDGES - 1 edges above it, are counted over the whole row in one pass
and the first edge whose count reaches kk is taken (~3 instructions a key and edge instead of a
histogram's ~26). Simulated on 600 rows each of normal, power-law, ReLU-shifted and log-normal
scores (kk = 512 of 16384, stride 8, BACK 3, 3 edges): no fallback, mean |S| ~ 600. When no edge
fits (ties, a range wider than the 64 bins) the select kernel's exact radix bounds run instead
(`_candidate_bounds`), or S is the whole row when it fits CAP. Rows that fit CAP take the sample
too when it can cut S (many rows at once: fewer pairs to rank).

Q programs per row each compute the bound from the whole row (loads and compares only), then
compact one chunk of it: the chunk's members go to positions (members before the chunk, a count
over the row) + (their prefix count in the chunk). That is the part that costs ~26 instructions
a key (`_prefix_count` and the stores), so each program pays it on 1/Q of the row.

Per member the rank key is stored next to the index: with FLOAT (and when every member of S lies
within SPAN_F of the row's best key) the exact fp32 integer min(v - vmin, SPAN_F + 1), else v
itself. Program 0 of each row writes the header [|S|, kk, float?] and PAD keys past S that never
count (BIG_F, or NOT_CANDIDATE), so the rank kernel reads whole chunks without masks.
"""

from __future__ import annotations

import triton
import triton.language as tl

from mxserve.kernels.early_start import wait_for_previous
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
HEAD = tl.constexpr(4)  # int32 words of a row's header: |S|, kk, float?, unused
PAD = tl.constexpr(64)  # keys past |S| that never count (the rank kernel's scalar loads need no mask)
BIG_F = tl.constexpr(3.0e7)  # a float key above every exact one (< 2^24 + 2)


@triton.jit
def _keys_at(scores_ptr, mask_ptr, row, C, n_num, stride_s, stride_m, cols, HAS_MASK: tl.constexpr):
    """uint32 keys at `cols` (any shape); NOT_CANDIDATE at cols >= n_num (past the row or its
    num_valid) or where the mask is off. The loads are masked by C alone: C is a multiple of 16 in
    practice, so they vectorize, and they do not wait for num_valid's load."""
    in_row = cols < C
    s = tl.load(scores_ptr + row * stride_s + cols, mask=in_row, other=0.0).to(tl.float32)
    ok = cols < n_num
    if HAS_MASK:
        ok = ok & (tl.load(mask_ptr + row * stride_m + cols, mask=in_row, other=0) != 0)
    return tl.where(ok, _order_key(s), tl.full([], NOT_CANDIDATE, tl.uint32))


@triton.jit
def _sampled_bound(scores_ptr, mask_ptr, row, C, n_num, stride_s, stride_m, v, kk,
                   HAS_MASK: tl.constexpr, BLOCK_C: tl.constexpr, SAMPLE: tl.constexpr, BACK: tl.constexpr,
                   EDGES: tl.constexpr, CAP: tl.constexpr):
    """(hi int64, n_hi int32, ok): the first of EDGES sample-bin edges whose count over the row
    reaches kk (see the module docstring); ok when one does with n_hi <= CAP. Edges stay inside
    bins 0..62; samples past them (and invalid ones) never count toward an edge."""
    vs = _keys_at(scores_ptr, mask_ptr, row, C, n_num, stride_s, stride_m,
                  tl.arange(0, BLOCK_C // SAMPLE) * SAMPLE, HAS_MASK)
    lo_s = tl.min(vs, axis=0)
    d = tl.minimum((vs - lo_s) >> FIRST_SHIFT, NUM_BINS - 1).to(tl.int32)
    # samples past bin 62 (and invalid ones) would all hit one counter (the histogram is a shared-
    # memory atomic a sample, and about half of a random row's samples are that far): spread them
    # over 64 bins past the range instead, which nothing reads
    far = (vs == NOT_CANDIDATE) | (d == NUM_BINS - 1)
    d = tl.where(far, NUM_BINS + (tl.arange(0, BLOCK_C // SAMPLE) & (NUM_BINS - 1)), d)
    cum = tl.cumsum(tl.histogram(d, 2 * NUM_BINS), axis=0)
    need = tl.maximum((kk + SAMPLE - 1) // SAMPLE - BACK, 1)
    in_range = tl.arange(0, 2 * NUM_BINS) < NUM_BINS
    b0 = tl.sum(((cum < need) & in_range).to(tl.int32), axis=0)  # the first edge: the end of bin b0
    # EDGES counts over the row (a compare and an add a key each); the first that reaches kk wins
    hi = tl.full([], NOT_CANDIDATE, tl.int64)
    n_hi = tl.full([], 0, tl.int32)
    found = kk < 0  # False, as a run-time scalar
    for e in tl.static_range(EDGES):
        edge = tl.minimum(lo_s.to(tl.int64) + ((b0 + 1 + e).to(tl.int64) << FIRST_SHIFT), NOT_CANDIDATE)
        count = tl.sum((v < edge.to(tl.uint32)).to(tl.int32), axis=0)
        take = ~found & (count >= kk) & (b0 + e < NUM_BINS - 1)
        hi = tl.where(take, edge, hi)
        n_hi = tl.where(take, count, n_hi)
        found = found | take
    return hi, n_hi, found & (n_hi <= CAP)


@triton.jit(do_not_specialize=["k"])  # run-time k: one compile for every value
def _topk_bound_kernel(
    scores_ptr, mask_ptr, num_valid_ptr, head_ptr, sidx_ptr, skey_ptr, C, k, stride_s, stride_m, stride_w,
    HAS_MASK: tl.constexpr, HAS_NUM: tl.constexpr, BLOCK_C: tl.constexpr, CAP: tl.constexpr,
    CHUNK: tl.constexpr, SAMPLE: tl.constexpr, BACK: tl.constexpr, EDGES: tl.constexpr, FLOAT: tl.constexpr,
    PDL: tl.constexpr = False,  # early start: kernels/early_start.py
):
    wait_for_previous(PDL)  # before any load or store (kernels/early_start.py)
    row = tl.program_id(0).to(tl.int64)
    q = tl.program_id(1)
    n_num = C
    if HAS_NUM:
        n_num = tl.maximum(tl.minimum(tl.load(num_valid_ptr + row), C), 0).to(tl.int32)  # int32 or int64
    cols = tl.arange(0, BLOCK_C)
    v = _keys_at(scores_ptr, mask_ptr, row, C, n_num, stride_s, stride_m, cols, HAS_MASK)
    n_valid = n_num
    if HAS_MASK:
        n_valid = tl.sum((v != NOT_CANDIDATE).to(tl.int32), axis=0)
    kk = tl.minimum(k, n_valid)
    lo = tl.full([], 0, tl.int64)
    hi = tl.full([], NOT_CANDIDATE, tl.int64)
    n_lo = tl.full([], 0, tl.int32)
    n_hi = n_valid
    ok = n_valid < 0  # False, as a run-time scalar
    if SAMPLE > 0:  # noqa: SIM102 (a compile-time branch around a run-time one)
        if n_valid > kk + kk // 4 + 32:  # worth a bound (rows that fit CAP too: fewer pairs to rank)
            hi, n_hi, ok = _sampled_bound(scores_ptr, mask_ptr, row, C, n_num, stride_s, stride_m, v, kk,
                                          HAS_MASK, BLOCK_C, SAMPLE, BACK, EDGES, CAP)
    if not ok:
        hi = tl.full([], NOT_CANDIDATE, tl.int64)
        n_hi = n_valid
        if n_valid > CAP:
            lo, hi, n_lo, n_hi = _candidate_bounds(v, kk, n_valid, CAP)
    vmin = tl.min(v, axis=0)
    use_float = n_valid < 0  # False, as a run-time scalar
    if FLOAT:
        # S's keys are below hi, so within hi - 1 - vmin of the best; NOT_CANDIDATE must stay past
        # the span (NOT_CANDIDATE - vmin > SPAN_F + 1) for the rank kernel's masked loads
        use_float = (hi - 1 - vmin.to(tl.int64) <= SPAN_F) & (vmin < NOT_CANDIDATE - SPAN_F - 2)
    # -- S's members before this program's chunk, then the chunk's own, in index order ----------
    c0 = q * CHUNK
    before = cols < c0
    tie = n_hi > CAP  # the bin [lo, hi) is one tied value: only its lowest-index kk - n_lo members
    lo32 = lo.to(tl.uint32)
    hi32 = hi.to(tl.uint32)
    if tie:
        bin_before = tl.sum((before & (v >= lo32) & (v < hi32)).to(tl.int32), axis=0)
        base = tl.sum((before & (v < lo32)).to(tl.int32), axis=0) + tl.minimum(bin_before, kk - n_lo)
        n_s = kk
    else:
        bin_before = tl.full([], 0, tl.int32)
        base = tl.sum((before & (v < hi32)).to(tl.int32), axis=0)
        n_s = n_hi
    cc = c0 + tl.arange(0, CHUNK)
    vc = tl.reshape(_keys_at(scores_ptr, mask_ptr, row, C, n_num, stride_s, stride_m, cc, HAS_MASK),
                    [CHUNK // 32, 32])
    cc = tl.reshape(cc, [CHUNK // 32, 32])  # reshaped like vc: same layout, no conversion
    take = vc < hi32
    if tie:
        in_bin = take & (vc >= lo32)
        take = (vc < lo32) | (in_bin & (bin_before + _prefix_count(in_bin, cc) <= kk - n_lo))
    pos = base + _prefix_count(take, cc) - 1
    if use_float:
        key = tl.minimum(vc - vmin, SPAN_F + 1).to(tl.float32).to(tl.int32, bitcast=True)
    else:
        key = vc.to(tl.int32, bitcast=True)
    tl.store(sidx_ptr + row * stride_w + pos, cc, mask=take)
    tl.store(skey_ptr + row * stride_w + pos, key, mask=take)
    if q == 0:
        pad = tl.arange(0, PAD)
        never = tl.where(use_float, tl.full([PAD], BIG_F, tl.float32).to(tl.int32, bitcast=True),
                         tl.full([PAD], -1, tl.int32))  # -1: NOT_CANDIDATE
        tl.store(skey_ptr + row * stride_w + n_s + pad, never)
        h = tl.arange(0, HEAD)
        tl.store(head_ptr + row * stride_w + h, tl.where(h == 0, n_s, tl.where(h == 1, kk, use_float.to(tl.int32))),
                 mask=h < 3)
