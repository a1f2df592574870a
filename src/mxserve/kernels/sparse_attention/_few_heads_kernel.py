"""Private Triton kernel of the sparse attention with sink on fp8_ds_mla caches for *few heads*
(launched only through `triton.py`, opt-in: MXSERVE_SPARSE_ATTENTION_FEW_HEADS=1).

Why (session 8): the packaged default model has 4 heads. The split-K kernels pad the head block to
16 (tl.dot needs M >= 16), so 75% of every MMA is padding, and a decode launch is a serial chain of
24 small dots per program plus a workspace and a combine launch: ~31 us a layer at 64 rows for
~7.5 MB of entries (~2 us of memory). Here there is no tensor core and no workspace:

* one program per (token, head): it folds every chunk of BLOCK_K keys of its token in registers
  (online softmax) and writes the output; one launch, no combine. A program reads only its own
  token's slots and entries, and the grid never changes its arithmetic, so a token's output is the
  same bits alone or in any batch (and trailing -1 columns, chunks without keys, change no bit:
  such a chunk multiplies the state by exp(0) = 1 and adds 0).
* q . k and p . v are fp32 products and sums on the CUDA cores (4 heads x ~200 keys x 512 channels
  x 2 is ~0.4 MFMA a token: nothing for the FMA units). The same arithmetic runs under the
  interpreter, so the CPU test checks the GPU's code path, not a stand-in.
* the NoPE codes of a chunk are one [BLOCK_K, 8, 64] byte tile (group 7 masked off: the RoPE
  channels are a [BLOCK_K, 64] BF16 tile beside it): 16-byte loads, one UE8M0 scale per key and
  group applied after the channel sum (q . k) or folded into the probability (p . v), never per
  channel (a power of two: exact but for subnormal results).
* the next chunk's entries are gathered before this chunk's products (its slots one chunk
  earlier still), so a chunk's load latency overlaps the previous chunk's arithmetic instead of
  adding to it (a decode program is latency-bound).

The fold (fixed by the list lengths and BLOCK_K alone): window chunks, then compressed chunks, in
ascending order; state (m, l, acc) from m = -1e30, l = 0, acc = 0; per chunk m' = max(m, max s),
a = exp(m - m'), p = exp(s - m'), l = l a + sum p, acc = acc a + p . v; then the sink as in
`_sparse_attention_combine_kernel` (`_sink_factor`). Another fold than the split-K kernels: the
same tolerance against the fp64 twin, not their bits.
"""

from __future__ import annotations

import triton
import triton.language as tl

from mxserve.kernels.attention_ops._cache_jit import e4m3fn_decode, entry_offsets, ue8m0_to_fp32
from mxserve.kernels.sparse_attention._sparse_attention_kernel import _sink_factor


@triton.jit
def _chunk_rows(j, buf0, s0_row, num_keys0, block_size0, page_stride0, buf1, s1_row, num_keys1, block_size1,
                page_stride1, num_chunks0, DATA_BYTES: tl.constexpr, SCALE_BYTES: tl.constexpr,
                BLOCK_K: tl.constexpr, ALIGNED: tl.constexpr):
    """Chunk j's entry data and scale pointers [BLOCK_K] and its valid keys (none past the lists)."""
    if j < num_chunks0:
        buf, slots_row, num_keys, block_size, page_stride = buf0, s0_row, num_keys0, block_size0, page_stride0
        k_start = j * BLOCK_K
    else:
        buf, slots_row, num_keys, block_size, page_stride = buf1, s1_row, num_keys1, block_size1, page_stride1
        k_start = (j - num_chunks0) * BLOCK_K
    kk = k_start + tl.arange(0, BLOCK_K)
    slots = tl.load(slots_row + kk, mask=kk < num_keys, other=-1)
    valid = slots >= 0
    data_off, scale_off = entry_offsets(slots, block_size, page_stride, DATA_BYTES, SCALE_BYTES)
    if ALIGNED:
        data_off = tl.multiple_of(data_off, 16)
    return buf + data_off, buf + scale_off, valid


@triton.jit
def _gather(rows, scales, valid, ALIGNED: tl.constexpr):
    """The chunk's raw bytes: NoPE codes [K, 8, 64] u8 (group 7 = 0), UE8M0 scale bytes [K, 8] (127 =
    1.0 where masked), RoPE BF16 bit patterns [K, 64] int16 (0 for invalid keys)."""
    g = tl.arange(0, 8)
    c = tl.arange(0, 64)
    ch = g[:, None] * 64 + c[None, :]  # [8, 64]: channel = code byte
    nope_ok = valid[:, None, None] & (ch < 448)[None, :, :]
    codes = tl.load(rows[:, None, None] + ch[None, :, :], mask=nope_ok, other=0)
    sb = tl.load(scales[:, None] + g[None, :], mask=valid[:, None] & (g < 7)[None, :], other=127)
    rm = valid[:, None] & (c >= 0)[None, :]
    if ALIGNED:
        rope = tl.load(rows.to(tl.pointer_type(tl.int16))[:, None] + 224 + c[None, :], mask=rm, other=0)
    else:
        b0 = tl.load(rows[:, None] + 448 + 2 * c[None, :], mask=rm, other=0).to(tl.int32)
        b1 = tl.load(rows[:, None] + 449 + 2 * c[None, :], mask=rm, other=0).to(tl.int32)
        rope = (b0 | (b1 << 8)).to(tl.int16)
    return codes, sb, rope


@triton.jit
def _decode(codes, NATIVE_FP8: tl.constexpr):
    """e4m3fn codes -> fp32 (exact either way: every finite code is a bf16 value)."""
    if NATIVE_FP8:
        return codes.to(tl.float8e4nv, bitcast=True).to(tl.float32)
    return e4m3fn_decode(codes)


# Run-time sizes as in `_sparse_attention_kernel` (one compile for every list length).
@triton.jit(do_not_specialize=["num_keys0", "stride_s0", "block_size0", "page_stride0", "num_keys1", "stride_s1",
                               "block_size1", "page_stride1", "num_chunks0", "num_chunks"])
def _sparse_attention_few_heads_kernel(
    q_ptr, sink_ptr, out_ptr,
    buf0, slots0_ptr, num_keys0, stride_s0, block_size0, page_stride0,
    buf1, slots1_ptr, num_keys1, stride_s1, block_size1, page_stride1,
    num_chunks0, num_chunks, scale, stride_qt, stride_qh, stride_ot, stride_oh,
    DATA_BYTES: tl.constexpr, SCALE_BYTES: tl.constexpr, BLOCK_K: tl.constexpr, ALIGNED: tl.constexpr,
    NATIVE_FP8: tl.constexpr, PREFETCH: tl.constexpr,
):
    """One program = one token x one head, every chunk of both lists, the output row. PREFETCH: the
    next chunk's bytes are loaded before this chunk's products (else at the top of its iteration)."""
    t = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1)
    g = tl.arange(0, 8)
    c = tl.arange(0, 64)
    ch = g[:, None] * 64 + c[None, :]
    q_row = q_ptr + t * stride_qt + h * stride_qh
    q_nope = tl.load(q_row + ch, mask=ch < 448, other=0.0).to(tl.float32)  # [8, 64]
    q_rope = tl.load(q_row + 448 + c).to(tl.float32)  # [64]
    s0_row = slots0_ptr + t * stride_s0
    s1_row = slots1_ptr + t * stride_s1

    if PREFETCH:
        rows, scales, valid = _chunk_rows(0, buf0, s0_row, num_keys0, block_size0, page_stride0, buf1, s1_row,
                                          num_keys1, block_size1, page_stride1, num_chunks0, DATA_BYTES, SCALE_BYTES,
                                          BLOCK_K, ALIGNED)
        codes, sb, rope = _gather(rows, scales, valid, ALIGNED)
        rows, scales, valid_n = _chunk_rows(1, buf0, s0_row, num_keys0, block_size0, page_stride0, buf1, s1_row,
                                            num_keys1, block_size1, page_stride1, num_chunks0, DATA_BYTES, SCALE_BYTES,
                                            BLOCK_K, ALIGNED)
    m = tl.full((), -1e30, dtype=tl.float32)
    l = tl.zeros((), dtype=tl.float32)
    acc_nope = tl.zeros((8, 64), dtype=tl.float32)
    acc_rope = tl.zeros((64,), dtype=tl.float32)
    for j in tl.range(0, num_chunks, num_stages=1):
        if PREFETCH:  # chunk j + 1's bytes in flight (its addresses came one chunk ago), chunk j + 2's addresses
            codes_n, sb_n, rope_n = _gather(rows, scales, valid_n, ALIGNED)
            rows, scales, valid_nn = _chunk_rows(j + 2, buf0, s0_row, num_keys0, block_size0, page_stride0, buf1,
                                                 s1_row, num_keys1, block_size1, page_stride1, num_chunks0, DATA_BYTES,
                                                 SCALE_BYTES, BLOCK_K, ALIGNED)
        else:
            rows, scales, valid = _chunk_rows(j, buf0, s0_row, num_keys0, block_size0, page_stride0, buf1, s1_row,
                                              num_keys1, block_size1, page_stride1, num_chunks0, DATA_BYTES,
                                              SCALE_BYTES, BLOCK_K, ALIGNED)
            codes, sb, rope = _gather(rows, scales, valid, ALIGNED)
        v = _decode(codes, NATIVE_FP8)  # [K, 8, 64]
        gs = ue8m0_to_fp32(sb)  # [K, 8]
        r = (rope.to(tl.int32) << 16).to(tl.float32, bitcast=True)  # [K, 64] (the sign extension shifts out)
        s = tl.sum(tl.sum(v * q_nope[None, :, :], axis=2) * gs, axis=1) + tl.sum(r * q_rope[None, :], axis=1)
        s = tl.where(valid, s * scale, float("-inf"))
        m_n = tl.maximum(m, tl.max(s, axis=0))  # finite: exp(-inf - m_n) = 0, never NaN
        a = tl.exp(m - m_n)
        p = tl.exp(s - m_n)  # [K]
        l = l * a + tl.sum(p, axis=0)
        pw = p[:, None] * gs  # [K, 8]: the probability times the key's group scale
        acc_nope = acc_nope * a + tl.sum(pw[:, :, None] * v, axis=0)
        acc_rope = acc_rope * a + tl.sum(p[:, None] * r, axis=0)
        m = m_n
        if PREFETCH:
            codes, sb, rope, valid, valid_n = codes_n, sb_n, rope_n, valid_n, valid_nn
    f = _sink_factor(m, l, tl.load(sink_ptr + h).to(tl.float32))  # no key at all: m = -1e30, l = 0: 0
    o_row = out_ptr + t * stride_ot + h * stride_oh
    tl.store(o_row + ch, acc_nope * f, mask=ch < 448)
    tl.store(o_row + 448 + c, acc_rope * f)
