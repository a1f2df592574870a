"""Private Triton kernel of the sparse attention with sink on fp8_ds_mla caches in *halves* (launched
only through `triton.py`; the pieces kernels of `_sparse_attention_kernel` stay the off switch).

Why (issue 11, session 7): the pieces kernel works a chunk as 8 entry pieces of 64 channels, so a
program runs 8 q.k dots and 16 p.v dots one after the other, each with its own shared-memory
staging, barrier and wait, and loads the query piece by piece inside that chain (its sm_90 SASS
shows each q piece's global load issued one dot ahead: an L2 round trip per dot). At batch 1 the
launch is ~16 us whatever the tile (session 5's sweep: 17-28 us for 16-64 heads x 16-64 keys), a
serial chain rather than work. Here q.k works a chunk as two *halves* of 256 channels: half 0 =
NoPE groups 0-3, half 1 = groups 4-6 + the BF16 RoPE channels, each gathered as one [K, 4, 64] tile
(one UE8M0 scale per key and group, broadcast over the group: no per-channel scale work) and
reshaped to [K, 256]: 2 dots of depth 256. p.v stays in 64-channel pieces (a fresh [BLOCK_H, 64]
partial per piece is what the fold below merges, so the fp32 state and the partial fit in
registers together), gathered again (from L1/L2) with the halves, before the first product. The
query is loaded once per program, first, and goes to shared memory once (a fold loop keeps it).

The fold (`_sparse_attention_kernel` states it; the same here): a token's state is the left fold of
its chunks' partials (m, l, acc) in ascending chunk order, starting from the first partial as it
is, merged by `_merge_weights` with the rounding written out; then the sink. Two launch modes, one
chunk code, so the same partial bits:
- split (FOLD=0): one program per (token, head block, channel block, chunk) writes the chunk's
  partial to the workspace; `_sparse_attention_combine_kernel` folds them (many programs for few
  tokens: decode at small batch).
- fold (FOLD=1): one program per (token, head block, channel block) folds all its chunks in
  registers with the combine's own merge and writes the output (no workspace, one launch: large
  batches, where the split's workspace traffic, 128 KB per chunk and token, was the cost).
Both fold the same partials in the same order with the same operations, so a row's output is the
same bits in either mode, and the launcher may choose the mode by batch size without breaking
batch invariance (the tests compare the two modes bit for bit).

Channel blocks (CH_BLOCKS, 1, 2 or 4; the fold takes 2 or 4): each program accumulates p.v for
8 / CH_BLOCKS pieces; every program of a chunk computes the same q.k (CH_BLOCKS copies of the q.k
work, for fewer accumulator registers and more programs). A channel of the output is the same bits
whichever block computes it; the first block alone writes m and l in split mode.

DOT: 0 = fp32 product-and-sum (the interpreter); 1 = bf16 tensor cores on exact bf16 entries, the
query split hi + lo for fp32 queries (Q_PIECES = 2) and the probabilities always.
"""

from __future__ import annotations

import triton
import triton.language as tl

from mxserve.kernels.attention_ops._cache_jit import e4m3fn_decode, entry_offsets, ue8m0_to_fp32
from mxserve.kernels.sparse_attention._sparse_attention_kernel import _merge_weights, _sink_factor


@triton.jit
def ds_mla_half(buf, data_off, scale_off, valid, HALF: tl.constexpr, BLOCK_K: tl.constexpr, ALIGNED: tl.constexpr,
                NATIVE_FP8: tl.constexpr, DOT: tl.constexpr):
    """Channels 256*HALF .. 256*HALF+255 of the gathered fp8_ds_mla entries, [BLOCK_K, 256] (bf16 for
    DOT 1, else fp32; 0 for invalid keys). Codes x UE8M0 group scales; in half 1 the last 64 channels
    are the BF16 RoPE values. The same values as `load_entries`."""
    g = tl.arange(0, 4)
    c = tl.arange(0, 64)
    row = buf + data_off[:, None, None]  # [K, 1, 1]
    ch = HALF * 256 + g[None, :, None] * 64 + c[None, None, :]  # [1, 4, 64]: channel = code byte
    if HALF == 0:
        m = valid[:, None, None] & (ch >= 0)
    else:
        m = valid[:, None, None] & (ch < 448)  # 448..511 are RoPE (below)
    code = tl.load(row + ch, mask=m, other=0)
    if NATIVE_FP8:
        v = code.to(tl.float8e4nv, bitcast=True).to(tl.float32)
    else:
        v = e4m3fn_decode(code)
    grp = HALF * 4 + g
    sb = tl.load(buf + scale_off[:, None] + grp[None, :], mask=valid[:, None] & (grp < 7)[None, :], other=127)
    v = v * ue8m0_to_fp32(sb)[:, :, None]  # one scale per (key, group): [K, 4] work, not [K, 256]
    if HALF == 1:
        rm = valid[:, None, None] & (c >= 0)[None, None, :]  # [K, 1, 64]
        if ALIGNED:
            bits = tl.load(row.to(tl.pointer_type(tl.int16)) + 224 + c[None, None, :], mask=rm, other=0)
            rope = bits.to(tl.bfloat16, bitcast=True).to(tl.float32)
        else:
            b0 = tl.load(row + 448 + 2 * c[None, None, :], mask=rm, other=0).to(tl.int32)
            b1 = tl.load(row + 449 + 2 * c[None, None, :], mask=rm, other=0).to(tl.int32)
            rope = ((b0 | (b1 << 8)) << 16).to(tl.float32, bitcast=True)
        v = tl.where((g == 3)[None, :, None], rope, v)
    v = tl.reshape(v, (BLOCK_K, 256))
    if DOT == 1:
        v = v.to(tl.bfloat16)  # exact: fp8 x power of two, or a BF16 value
    return v


@triton.jit
def load_q_half(q_rows, hm, HALF: tl.constexpr):
    """The query's channels 256*HALF .. +255 for this program's heads, [BLOCK_H, 256] in its dtype."""
    c = HALF * 256 + tl.arange(0, 256)
    return tl.load(q_rows[:, None] + c[None, :], mask=hm[:, None] & (c >= 0)[None, :], other=0.0)


@triton.jit
def _qk_half(s, q, k, DOT: tl.constexpr, Q_PIECES: tl.constexpr):
    """s + q . k^T over one half (q [BLOCK_H, 256], k [BLOCK_K, 256])."""
    q = q.to(tl.float32)
    if DOT == 0:
        s += tl.sum(q[:, None, :] * k.to(tl.float32)[None, :, :], axis=2)
    else:
        q_hi = q.to(tl.bfloat16)
        s = tl.dot(q_hi, tl.trans(k), s)
        if Q_PIECES == 2:
            s = tl.dot((q - q_hi.to(tl.float32)).to(tl.bfloat16), tl.trans(k), s)
    return s


@triton.jit
def ds_mla_piece(buf, data_off, scale_off, valid, G, ALIGNED: tl.constexpr, NATIVE_FP8: tl.constexpr,
                 DOT: tl.constexpr):
    """Channels 64*G .. 64*G+63 of the gathered entries, [BLOCK_K, 64], for a run-time piece G in 0..7
    (0..6: a NoPE group, codes x its UE8M0 scale; 7: the BF16 RoPE channels). The load of the other
    kind is masked off whole (a uniform predicate: no memory traffic). Same values as `ds_mla_half`."""
    c = tl.arange(0, 64)
    row = buf + data_off[:, None]
    g = tl.full(valid.shape, 0, tl.int32) + G  # [K]: the interpreter cannot AND a scalar into a mask
    nope = valid & (g < 7)
    code = tl.load(row + G * 64 + c[None, :], mask=nope[:, None] & (c >= 0)[None, :], other=0)
    if NATIVE_FP8:
        v = code.to(tl.float8e4nv, bitcast=True).to(tl.float32)
    else:
        v = e4m3fn_decode(code)
    sb = tl.load(buf + scale_off + G, mask=nope, other=127)
    v = v * ue8m0_to_fp32(sb)[:, None]
    rm = (valid & (g == 7))[:, None] & (c >= 0)[None, :]
    if ALIGNED:
        bits = tl.load(row.to(tl.pointer_type(tl.int16)) + 224 + c[None, :], mask=rm, other=0)
        rope = bits.to(tl.bfloat16, bitcast=True).to(tl.float32)
    else:
        b0 = tl.load(row + 448 + 2 * c[None, :], mask=rm, other=0).to(tl.int32)
        b1 = tl.load(row + 449 + 2 * c[None, :], mask=rm, other=0).to(tl.int32)
        rope = ((b0 | (b1 << 8)) << 16).to(tl.float32, bitcast=True)
    v = tl.where((g == 7)[:, None], rope, v)
    if DOT == 1:
        v = v.to(tl.bfloat16)
    return v


@triton.jit
def _pv(p_hi, p_lo, p, k, DOT: tl.constexpr):
    """p [BLOCK_H, BLOCK_K] . k [BLOCK_K, 64] in fp32 (DOT 1: p split hi + lo, two bf16 dots)."""
    if DOT == 0:
        return tl.sum(p[:, :, None] * k.to(tl.float32)[None, :, :], axis=1)
    else:
        return tl.dot(p_lo, k, tl.dot(p_hi, k))


@triton.jit
def _scores(q0, q1, k0, k1, valid, scale, BLOCK_H: tl.constexpr, BLOCK_K: tl.constexpr, DOT: tl.constexpr,
            Q_PIECES: tl.constexpr):
    """The chunk's softmax partial from its two halves: m [BLOCK_H] (-1e30 without a valid key),
    l [BLOCK_H], p [BLOCK_H, BLOCK_K] (0 for invalid keys)."""
    s = _qk_half(tl.zeros((BLOCK_H, BLOCK_K), dtype=tl.float32), q0, k0, DOT, Q_PIECES)
    s = _qk_half(s, q1, k1, DOT, Q_PIECES)
    s = tl.where(valid[None, :], s * scale, float("-inf"))
    m = tl.maximum(tl.max(s, axis=1), -1e30)  # finite: exp(-inf - m) stays 0, never NaN
    p = tl.exp(s - m[:, None])
    return m, tl.sum(p, axis=1), p


@triton.jit
def _store_piece(rows, a, hm, G):
    """a [BLOCK_H, 64] to channels 64*G .. 64*G+63 of the rows (one per head)."""
    c = G * 64 + tl.arange(0, 64)
    tl.store(rows[:, None] + c[None, :], a, mask=hm[:, None] & (c >= 0)[None, :])


@triton.jit
def _merge(acc, a, first, wa, wb):
    """The combine kernel's merge of a chunk's partial a into the state, operation for operation:
    the first partial as it is, then state * wa + partial * wb with one explicit fma."""
    return tl.where(first, a, tl.fma(acc, wa[:, None], a * wb[:, None]))


# Run-time sizes as in `_sparse_attention_kernel` (one compile for every list length).
@triton.jit(do_not_specialize=["num_keys0", "stride_s0", "block_size0", "page_stride0", "num_keys1", "stride_s1",
                               "block_size1", "page_stride1", "num_chunks0", "num_chunks"])
def _sparse_attention_fold_kernel(
    q_ptr, part_acc_ptr, part_ml_ptr, sink_ptr, out_ptr,
    buf0, slots0_ptr, num_keys0, stride_s0, block_size0, page_stride0,
    buf1, slots1_ptr, num_keys1, stride_s1, block_size1, page_stride1,
    num_chunks0, num_chunks, H, scale, stride_qt, stride_qh, stride_ot, stride_oh,
    DATA_BYTES: tl.constexpr, SCALE_BYTES: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_K: tl.constexpr,
    CH_BLOCKS: tl.constexpr, FOLD: tl.constexpr, STAGES: tl.constexpr, DOT: tl.constexpr, Q_PIECES: tl.constexpr,
    ALIGNED: tl.constexpr, NATIVE_FP8: tl.constexpr, PDL: tl.constexpr,
):
    """One program = one token x BLOCK_H heads x one channel block (8 / CH_BLOCKS pieces of 64) x
    (FOLD 0) one chunk, writing its partial, or (FOLD 1) every chunk, writing the output. PDL (split
    mode): the combine kernel may launch once every program here has started (it waits for this
    kernel's end before reading anything: `_sparse_attention_combine_kernel`)."""
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()
    PV_PIECES: tl.constexpr = 8 // CH_BLOCKS
    t = tl.program_id(0).to(tl.int64)
    pid1 = tl.program_id(1)
    cb = pid1 % CH_BLOCKS
    heads = (pid1 // CH_BLOCKS) * BLOCK_H + tl.arange(0, BLOCK_H)
    hm = heads < H
    q_rows = q_ptr + t * stride_qt + heads * stride_qh
    q0 = load_q_half(q_rows, hm, 0)  # loop-invariant; first, so its latency overlaps the chunk loads
    q1 = load_q_half(q_rows, hm, 1)
    s0_row = slots0_ptr + t * stride_s0
    s1_row = slots1_ptr + t * stride_s1
    g0 = cb * PV_PIECES
    if FOLD:
        j_lo = 0
        j_hi = num_chunks
    else:
        j_lo = tl.program_id(2)
        j_hi = j_lo + 1
    m = tl.full((BLOCK_H,), -1e30, dtype=tl.float32)
    l = tl.zeros((BLOCK_H,), dtype=tl.float32)
    acc0 = tl.zeros((BLOCK_H, 64), dtype=tl.float32)
    acc1 = tl.zeros((BLOCK_H, 64), dtype=tl.float32)
    acc2 = tl.zeros((BLOCK_H, 64), dtype=tl.float32)
    acc3 = tl.zeros((BLOCK_H, 64), dtype=tl.float32)
    for j in tl.range(j_lo, j_hi, num_stages=STAGES):
        if j < num_chunks0:
            buf, slots_row, num_keys, block_size, page_stride = buf0, s0_row, num_keys0, block_size0, page_stride0
            k_start = j * BLOCK_K
        else:
            buf, slots_row, num_keys, block_size, page_stride = buf1, s1_row, num_keys1, block_size1, page_stride1
            k_start = (j - num_chunks0) * BLOCK_K
        kk = k_start + tl.arange(0, BLOCK_K)
        slots = tl.load(slots_row + kk, mask=kk < num_keys, other=-1)  # columns >= num_keys: no key
        valid = slots >= 0
        data_off, scale_off = entry_offsets(slots, block_size, page_stride, DATA_BYTES, SCALE_BYTES)
        if ALIGNED:
            data_off = tl.multiple_of(data_off, 16)
        # Every gather of the chunk before its first product (their latencies overlap, and each
        # decoded tile goes to shared memory at once, so the offsets and codes die early): the two
        # halves for q . k, and this channel block's pieces for p . v (the same bytes again, from L1/L2).
        k0 = ds_mla_half(buf, data_off, scale_off, valid, 0, BLOCK_K, ALIGNED, NATIVE_FP8, DOT)
        k1 = ds_mla_half(buf, data_off, scale_off, valid, 1, BLOCK_K, ALIGNED, NATIVE_FP8, DOT)
        v0 = ds_mla_piece(buf, data_off, scale_off, valid, g0, ALIGNED, NATIVE_FP8, DOT)
        v1 = v0
        v2 = v0
        v3 = v0
        if PV_PIECES > 1:
            v1 = ds_mla_piece(buf, data_off, scale_off, valid, g0 + 1, ALIGNED, NATIVE_FP8, DOT)
        if PV_PIECES > 2:
            v2 = ds_mla_piece(buf, data_off, scale_off, valid, g0 + 2, ALIGNED, NATIVE_FP8, DOT)
            v3 = ds_mla_piece(buf, data_off, scale_off, valid, g0 + 3, ALIGNED, NATIVE_FP8, DOT)
        v4 = v0
        v5 = v0
        v6 = v0
        v7 = v0
        if PV_PIECES > 4:
            v4 = ds_mla_piece(buf, data_off, scale_off, valid, 4, ALIGNED, NATIVE_FP8, DOT)
            v5 = ds_mla_piece(buf, data_off, scale_off, valid, 5, ALIGNED, NATIVE_FP8, DOT)
            v6 = ds_mla_piece(buf, data_off, scale_off, valid, 6, ALIGNED, NATIVE_FP8, DOT)
            v7 = ds_mla_piece(buf, data_off, scale_off, valid, 7, ALIGNED, NATIVE_FP8, DOT)
        m_c, l_c, p = _scores(q0, q1, k0, k1, valid, scale, BLOCK_H, BLOCK_K, DOT, Q_PIECES)
        if DOT == 1:
            p_hi = p.to(tl.bfloat16)
            p_lo = (p - p_hi.to(tl.float32)).to(tl.bfloat16)
        else:
            p_hi = p
            p_lo = p
        if FOLD:
            # the combine kernel's fold, operation for operation (same bits as the split mode)
            first = j == 0
            m_n, wa, wb = _merge_weights(m, m_c)
            acc0 = _merge(acc0, _pv(p_hi, p_lo, p, v0, DOT), first, wa, wb)
            if PV_PIECES > 1:
                acc1 = _merge(acc1, _pv(p_hi, p_lo, p, v1, DOT), first, wa, wb)
            if PV_PIECES > 2:
                acc2 = _merge(acc2, _pv(p_hi, p_lo, p, v2, DOT), first, wa, wb)
                acc3 = _merge(acc3, _pv(p_hi, p_lo, p, v3, DOT), first, wa, wb)
            l = tl.where(first, l_c, tl.fma(l, wa, l_c * wb))
            m = tl.where(first, m_c, m_n)
        else:
            part = t * num_chunks + j
            rows = part_acc_ptr + (part * H + heads) * 512
            _store_piece(rows, _pv(p_hi, p_lo, p, v0, DOT), hm, g0)
            if PV_PIECES > 1:
                _store_piece(rows, _pv(p_hi, p_lo, p, v1, DOT), hm, g0 + 1)
            if PV_PIECES > 2:
                _store_piece(rows, _pv(p_hi, p_lo, p, v2, DOT), hm, g0 + 2)
                _store_piece(rows, _pv(p_hi, p_lo, p, v3, DOT), hm, g0 + 3)
            if PV_PIECES > 4:
                _store_piece(rows, _pv(p_hi, p_lo, p, v4, DOT), hm, 4)
                _store_piece(rows, _pv(p_hi, p_lo, p, v5, DOT), hm, 5)
                _store_piece(rows, _pv(p_hi, p_lo, p, v6, DOT), hm, 6)
                _store_piece(rows, _pv(p_hi, p_lo, p, v7, DOT), hm, 7)
            if cb == 0:  # one program of the channel blocks writes m and l (the others computed the same)
                ml = part_ml_ptr + part * 2 * H + heads
                tl.store(ml, m_c, mask=hm)
                tl.store(ml + H, l_c, mask=hm)
    if FOLD:
        sink = tl.load(sink_ptr + heads, mask=hm, other=0.0).to(tl.float32)
        f = _sink_factor(m, l, sink)[:, None]  # no chunk at all: m = -1e30, l = 0: output 0
        o_rows = out_ptr + t * stride_ot + heads * stride_oh
        _store_piece(o_rows, acc0 * f, hm, g0)
        if PV_PIECES > 1:
            _store_piece(o_rows, acc1 * f, hm, g0 + 1)
        if PV_PIECES > 2:
            _store_piece(o_rows, acc2 * f, hm, g0 + 2)
            _store_piece(o_rows, acc3 * f, hm, g0 + 3)
