"""Private Triton kernel of the sparse attention with sink; launched only through `triton.py`.

One program = one query token x BLOCK_H heads. It walks the token's slot lists (source 0, the
window cache, then source 1, the compressed cache), gathers BLOCK_K entries at a time straight
from the caches' bytes (`load_entries`: fp8_ds_mla NoPE codes x UE8M0 group scales, BF16 RoPE;
or plain rows), and keeps an online softmax (running max, sum, fp32 accumulator). The sink
only enlarges the denominator, at the end. Every token is computed alone, in a fixed order that
depends on its own slot lists only, so results do not depend on the batch (batch invariance).

DOT selects the arithmetic of the two products: 0 = fp32 product-and-sum (the interpreter, whose
numpy matmul sums in a shape-dependent order); 1 = bf16 tensor cores, where the cache values
are exact in bf16 (fp8 x power of two, bf16 RoPE), fp32 queries are split hi + lo and the
probabilities always are (two dots, ~16 significant bits instead of 8); 2 = fp32 "ieee" dots
for fp32 caches (the exact numeric mode).
"""

from __future__ import annotations

import triton
import triton.language as tl

from mxserve.kernels.attention_ops._cache_jit import entry_offsets, load_entries


@triton.jit
def _attend_source(acc, m_i, l_i, q, q_hi, q_lo, t, buf, slots_ptr, num_keys, stride_s, block_size, page_stride,
                   scale, cols, MODE: tl.constexpr, HEAD_DIM: tl.constexpr, DATA_BYTES: tl.constexpr,
                   SCALE_BYTES: tl.constexpr, BLOCK_K: tl.constexpr, DOT: tl.constexpr, Q_PIECES: tl.constexpr):
    for k0 in range(0, num_keys, BLOCK_K):
        kk = k0 + tl.arange(0, BLOCK_K)
        slots = tl.load(slots_ptr + t * stride_s + kk, mask=kk < num_keys, other=-1)
        valid = slots >= 0
        data_off, scale_off = entry_offsets(slots, block_size, page_stride, DATA_BYTES, SCALE_BYTES)
        kv = load_entries(buf, data_off, scale_off, valid, cols, MODE, HEAD_DIM)  # fp32 [BLOCK_K, BLOCK_D]
        if DOT == 0:
            s = tl.sum(q[:, None, :] * kv[None, :, :], axis=2)
        elif DOT == 1:
            kvb = kv.to(tl.bfloat16)  # exact for fp8_ds_mla and bf16 entries
            s = tl.dot(q_hi, tl.trans(kvb))
            if Q_PIECES == 2:
                s = tl.dot(q_lo, tl.trans(kvb), s)
        else:
            s = tl.dot(q, tl.trans(kv), input_precision="ieee")
        s = tl.where(valid[None, :], s * scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        if DOT == 0:
            pv = tl.sum(p[:, :, None] * kv[None, :, :], axis=1)
        elif DOT == 1:
            p_hi = p.to(tl.bfloat16)
            p_lo = (p - p_hi.to(tl.float32)).to(tl.bfloat16)
            pv = tl.dot(p_hi, kvb)
            pv = tl.dot(p_lo, kvb, pv)
        else:
            pv = tl.dot(p, kv, input_precision="ieee")
        acc = acc * alpha[:, None] + pv
        m_i = m_new
    return acc, m_i, l_i


@triton.jit(do_not_specialize=['num_keys0', 'num_keys1'])  # run-time sizes: one compile for every value
def _sparse_attention_kernel(
    q_ptr, out_ptr, sink_ptr,
    buf0, slots0_ptr, num_keys0, stride_s0, block_size0, page_stride0,
    buf1, slots1_ptr, num_keys1, stride_s1, block_size1, page_stride1,
    H, scale, stride_qt, stride_qh, stride_ot, stride_oh,
    MODE: tl.constexpr, HEAD_DIM: tl.constexpr, DATA_BYTES: tl.constexpr, SCALE_BYTES: tl.constexpr,
    BLOCK_H: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_D: tl.constexpr, DOT: tl.constexpr,
    Q_PIECES: tl.constexpr, NUM_SOURCES: tl.constexpr,
):
    t = tl.program_id(0)
    heads = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    cols = tl.arange(0, BLOCK_D)
    hm = heads < H
    qm = hm[:, None] & (cols < HEAD_DIM)[None, :]
    q = tl.load(q_ptr + t * stride_qt + heads[:, None] * stride_qh + cols[None, :], mask=qm, other=0.0)
    q = q.to(tl.float32)
    q_hi = q.to(tl.bfloat16)
    q_lo = (q - q_hi.to(tl.float32)).to(tl.bfloat16)
    acc = tl.zeros((BLOCK_H, BLOCK_D), dtype=tl.float32)
    m_i = tl.full((BLOCK_H,), -1e30, dtype=tl.float32)  # finite: exp(-inf - m) stays 0, never NaN
    l_i = tl.zeros((BLOCK_H,), dtype=tl.float32)
    acc, m_i, l_i = _attend_source(acc, m_i, l_i, q, q_hi, q_lo, t, buf0, slots0_ptr, num_keys0, stride_s0,
                                   block_size0, page_stride0, scale, cols, MODE, HEAD_DIM, DATA_BYTES,
                                   SCALE_BYTES, BLOCK_K, DOT, Q_PIECES)
    if NUM_SOURCES == 2:
        acc, m_i, l_i = _attend_source(acc, m_i, l_i, q, q_hi, q_lo, t, buf1, slots1_ptr, num_keys1, stride_s1,
                                       block_size1, page_stride1, scale, cols, MODE, HEAD_DIM, DATA_BYTES,
                                       SCALE_BYTES, BLOCK_K, DOT, Q_PIECES)
    sink = tl.load(sink_ptr + heads, mask=hm, other=0.0).to(tl.float32)
    m_f = tl.maximum(m_i, sink)
    keep = tl.exp(m_i - m_f)
    denom = l_i * keep + tl.exp(sink - m_f)
    out = acc * (keep / denom)[:, None]
    tl.store(out_ptr + t * stride_ot + heads[:, None] * stride_oh + cols[None, :], out, mask=qm)
