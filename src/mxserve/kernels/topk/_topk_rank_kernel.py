"""Private Triton kernel of the rank top-k (session 7, issue 11); launched only through
`topk/triton.py`.

Keys as in `_topk_select_kernel._order_key`: uint32 `v`, ascending = ranking order, -0.0 folded
into +0.0, NOT_CANDIDATE (0xFFFFFFFF) for a masked or missing candidate, ties broken by the lower
index; a NaN ranks by its bits.

Where the select kernel's time went (session 5, H200): one program per row did all the
per-candidate work (~110 instructions a candidate at 16384: a 64-bin histogram per radix level,
the compaction, a gather of the winners' scores), then either a `tl.sort` (5-6 us for 1024 words
at one row per SM) or a rank count that reduced across 512 threads for every 16 members.

Here the order comes from counting. Each of P programs of a row takes an equal share of the
candidate set S (positions in index order) and counts, for each member i, the members ranked
before it: rank_i = #{j : v_j < v_i} + #{j < i : v_j == v_i}; a member with rank < kk writes its
index to out[rank]. Two forms of S:
- FULL (rows of at most CAP candidates, one launch): S is the row itself, read directly. The
  count runs in [MB, JB] tiles (MB members against JB columns; a thread holds many members of
  one column, so a column's key and its adjustment are computed once for all of them): a_j = v_j
  for a column before the members (counted when v_j <= v_i, i.e. a_j < v_i + 1), v_j + 1 after
  them (v_j < v_i), "never" inside the block, whose pairs are counted exactly, with positions,
  in one [MB, MB] tile.
- S (after `_topk_bound_kernel`, which wrote S's indices, each member's rank key and the row's
  header): [JB, MB] tiles with the members along the threads, so a member's count over j stays
  in its thread (no cross-thread reduction per block of members, which cost as much as the
  count). Per member and chunk of JB: "<=" when the whole chunk precedes it, "<" otherwise, and
  the ties before it inside its own chunk are added from one gathered [JB, MB] tile. When the
  header says so the keys are exact fp32 integers (d = v - vmin < 2^24) and a pair is one
  saturating add and one add on the FMA pipe (`min(max(b - d_j, 0), 1)` compiles to FADD.SAT on
  sm_90), about 2.5x the integer compare's throughput; otherwise uint32 compares.
The kernel writes every output slot (-1 past the winners), so `out` needs no fill.
"""

from __future__ import annotations

import triton
import triton.language as tl

from mxserve.kernels.early_start import wait_for_previous
from mxserve.kernels.topk._topk_bound_kernel import BIG_F, _keys_at
from mxserve.kernels.topk._topk_select_kernel import NOT_CANDIDATE


@triton.jit
def _rank_row_block(scores_ptr, mask_ptr, out_row, row, C, n_num, kk, m0, m_hi, stride_s, stride_m,
                    HAS_MASK: tl.constexpr, NJ: tl.constexpr, JB: tl.constexpr, MB: tl.constexpr):
    """FULL: ranks of the row's candidates m0 .. m0 + MB (< m_hi) among the row; out[rank] = index
    for the winners (rank < kk). See the module docstring."""
    mi = m0 + tl.arange(0, MB)
    vi1 = _keys_at(scores_ptr, mask_ptr, row, C, n_num, stride_s, stride_m, mi, HAS_MASK)
    i = mi[:, None]
    vi = vi1[:, None]
    bi = vi + 1  # does not wrap for a valid member (v <= 0xFFFFFFFE); invalid members write nothing
    acc = tl.zeros([MB, JB], tl.int32)
    for c in tl.static_range(NJ):  # branch-free: ptxas issues the chunks' loads ahead
        j = c * JB + tl.arange(0, JB)[None, :]
        vj = _keys_at(scores_ptr, mask_ptr, row, C, n_num, stride_s, stride_m, j, HAS_MASK)
        aj = tl.where((j >= m0) & (j < m0 + MB), NOT_CANDIDATE, tl.where(j < m0, vj, vj + 1))
        aj = tl.where(vj == NOT_CANDIDATE, NOT_CANDIDATE, aj)  # NOT_CANDIDATE is never below bi
        acc += (aj < bi).to(tl.int32)
    jb = mi[None, :]  # the block's own positions and keys as columns
    vb = vi1[None, :]
    diag = (vb < vi) | ((vb == vi) & (jb < i))
    rank = tl.sum(acc, axis=1) + tl.sum(diag.to(tl.int32), axis=1)
    tl.store(out_row + rank, mi.to(tl.int64), mask=(mi < m_hi) & (vi1 != NOT_CANDIDATE) & (rank < kk))


@triton.jit
def _rank_s_block(sidx_ptr, skey_ptr, n_s, kk, use_float, m0, m_hi, out_row,
                  JB: tl.constexpr, MB: tl.constexpr):
    """S: ranks of S's members m0 .. m0 + MB (< m_hi) among S; out[rank] = index for the winners
    (rank < kk). Members along dim 1 (the threads), S's chunks along dim 0. See the module
    docstring."""
    i = m0 + tl.arange(0, MB)[None, :]
    has = i < m_hi
    ki = tl.load(skey_ptr + i, mask=has, other=0)
    idx = tl.load(sidx_ptr + i, mask=has, other=0)
    r = tl.arange(0, JB)[:, None]
    jo = (i // JB) * JB + r  # the member's own chunk, up to it: its ties there come first
    ko = tl.load(skey_ptr + jo, mask=has & (jo < i), other=-1)  # -1: never equal to a member's key
    if use_float:
        fkey_ptr = skey_ptr.to(tl.pointer_type(tl.float32))  # the bound kernel stored fp32 keys
        fi = ki.to(tl.float32, bitcast=True)
        b = fi + 1.0
        facc = (ko.to(tl.float32, bitcast=True) == fi).to(tl.float32)
        fnxt = tl.load(fkey_ptr + r, mask=r < n_s, other=BIG_F)  # one chunk ahead
        for j0 in range(0, n_s, JB):
            fj = fnxt
            fnxt = tl.load(fkey_ptr + j0 + JB + r, mask=j0 + JB + r < n_s, other=BIG_F)
            bsel = tl.where(j0 + JB <= i, b, fi)  # the whole chunk precedes i: ties count
            facc += tl.minimum(tl.maximum(bsel - fj, 0.0), 1.0)
        rank = tl.sum(facc, axis=0).to(tl.int32)
    else:
        ui = ki.to(tl.uint32, bitcast=True)
        iacc = (ko.to(tl.uint32, bitcast=True) == ui).to(tl.int32)
        unxt = tl.load(skey_ptr + r, mask=r < n_s, other=-1)  # -1: NOT_CANDIDATE, never below a member
        for j0 in range(0, n_s, JB):
            uj = unxt.to(tl.uint32, bitcast=True)
            unxt = tl.load(skey_ptr + j0 + JB + r, mask=j0 + JB + r < n_s, other=-1)
            usel = tl.where(j0 + JB <= i, ui + 1, ui)  # members are valid: ui + 1 does not wrap
            iacc += (uj < usel).to(tl.int32)
        rank = tl.sum(iacc, axis=0)
    rank = tl.reshape(rank, [MB])
    tl.store(out_row + rank, tl.reshape(idx, [MB]).to(tl.int64), mask=tl.reshape(has, [MB]) & (rank < kk))


@triton.jit
def _rank_s_scalar(sidx_ptr, skey_ptr, n_s, kk, use_float, m0, m_hi, out_row, JB: tl.constexpr, MB: tl.constexpr):
    """S, many members a program: as `_rank_s_block`, but the members are a 1-D tensor (a few per
    thread) and S's keys are read one at a time as scalars (one uniform load serves every
    thread), so nothing changes layout inside the loop; JB keys are unrolled per iteration."""
    i = m0 + tl.arange(0, MB)
    has = i < m_hi
    ki = tl.load(skey_ptr + i, mask=has, other=0)
    idx = tl.load(sidx_ptr + i, mask=has, other=0)
    own0 = (i // JB) * JB  # the member's own chunk, up to it: its ties there come first
    if use_float:
        fkey_ptr = skey_ptr.to(tl.pointer_type(tl.float32))  # the bound kernel stored fp32 keys
        fi = ki.to(tl.float32, bitcast=True)
        b = fi + 1.0
        facc = tl.zeros([MB], tl.float32)
        for jj in tl.static_range(JB):
            fo = tl.load(fkey_ptr + own0 + jj, mask=has & (own0 + jj < i), other=BIG_F)
            facc += (fo == fi).to(tl.float32)
        f1 = tl.zeros([MB], tl.float32)  # four accumulators: four independent add chains a member
        f2 = tl.zeros([MB], tl.float32)
        f3 = tl.zeros([MB], tl.float32)
        for j0 in range(0, n_s, JB):  # past S: the bound kernel's padding, which never counts
            bsel = tl.where(j0 + JB <= i, b, fi)  # the whole chunk precedes i: ties count
            for jj in tl.static_range(0, JB, 4):
                facc += tl.minimum(tl.maximum(bsel - tl.load(fkey_ptr + j0 + jj), 0.0), 1.0)
                f1 += tl.minimum(tl.maximum(bsel - tl.load(fkey_ptr + j0 + jj + 1), 0.0), 1.0)
                f2 += tl.minimum(tl.maximum(bsel - tl.load(fkey_ptr + j0 + jj + 2), 0.0), 1.0)
                f3 += tl.minimum(tl.maximum(bsel - tl.load(fkey_ptr + j0 + jj + 3), 0.0), 1.0)
        rank = ((facc + f1) + (f2 + f3)).to(tl.int32)
    else:
        ui = ki.to(tl.uint32, bitcast=True)
        iacc = tl.zeros([MB], tl.int32)
        for jj in tl.static_range(JB):
            uo = tl.load(skey_ptr + own0 + jj, mask=has & (own0 + jj < i), other=-1).to(tl.uint32, bitcast=True)
            iacc += (uo == ui).to(tl.int32)
        for j0 in range(0, n_s, JB):  # past S: the bound kernel's padding, which never counts
            usel = tl.where(j0 + JB <= i, ui + 1, ui)  # members are valid: ui + 1 does not wrap
            for jj in tl.static_range(JB):
                iacc += (tl.load(skey_ptr + j0 + jj).to(tl.uint32, bitcast=True) < usel).to(tl.int32)
        rank = iacc
    tl.store(out_row + rank, idx.to(tl.int64), mask=has & (rank < kk))


@triton.jit(do_not_specialize=["k"])  # run-time k: one compile for every value
def _topk_rank_kernel(
    scores_ptr, mask_ptr, num_valid_ptr, out_ptr, head_ptr, sidx_ptr, skey_ptr, C, k, stride_s, stride_m, stride_o,
    stride_w, HAS_MASK: tl.constexpr, HAS_NUM: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_K: tl.constexpr,
    CAP: tl.constexpr, P: tl.constexpr, FROM_S: tl.constexpr, SCALAR_J: tl.constexpr, MB: tl.constexpr,
    JB: tl.constexpr,
    PDL: tl.constexpr = False,  # early start: kernels/early_start.py
):
    wait_for_previous(PDL)  # before any load or store (kernels/early_start.py)
    row = tl.program_id(0).to(tl.int64)
    part = tl.program_id(1)
    out_row = out_ptr + row * stride_o
    if FROM_S:
        n_s = tl.load(head_ptr + row * stride_w)
        kk = tl.load(head_ptr + row * stride_w + 1)
        use_float = tl.load(head_ptr + row * stride_w + 2) != 0
    else:
        n_num = C
        if HAS_NUM:
            n_num = tl.maximum(tl.minimum(tl.load(num_valid_ptr + row), C), 0).to(tl.int32)  # int32 or int64
        n_s = n_num
        kk = tl.minimum(k, n_num)
        if HAS_MASK:
            v = _keys_at(scores_ptr, mask_ptr, row, C, n_num, stride_s, stride_m, tl.arange(0, BLOCK_C), HAS_MASK)
            kk = tl.minimum(k, tl.sum((v != NOT_CANDIDATE).to(tl.int32), axis=0))
    # -- this program's members: an equal share of S's positions, in blocks of MB ----------------
    share = tl.cdiv(n_s, P)
    m_lo = part * share
    m_hi = tl.minimum(m_lo + share, n_s)
    for m0 in range(m_lo, m_hi, MB):
        if SCALAR_J:
            _rank_s_scalar(sidx_ptr + row * stride_w, skey_ptr + row * stride_w, n_s, kk, use_float, m0, m_hi, out_row,
                           JB, MB)
        elif FROM_S:
            _rank_s_block(sidx_ptr + row * stride_w, skey_ptr + row * stride_w, n_s, kk, use_float, m0, m_hi, out_row, JB, MB)
        else:
            _rank_row_block(scores_ptr, mask_ptr, out_row, row, C, n_num, kk, m0, m_hi, stride_s, stride_m,
                            HAS_MASK, BLOCK_C // JB, JB, MB)
    if part == 0:
        jj = tl.arange(0, BLOCK_K)
        tl.store(out_row + jj, tl.full([BLOCK_K], -1, tl.int64), mask=(jj >= kk) & (jj < k))
