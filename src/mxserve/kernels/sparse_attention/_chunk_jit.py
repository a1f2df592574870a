"""Private @triton.jit code of one chunk of the split-K sparse attention (launched by the kernels
in `_sparse_attention_kernel`).

A *chunk* is BLOCK_K consecutive columns of one source's slot list, for one query token and
BLOCK_H heads. `attend_chunk` gathers its entries straight from the cache bytes and returns the
chunk's own softmax partial: m (max logit, -1e30 when no key is valid), l = sum exp(s - m), the
probabilities p, and the entries in eight *pieces* of PIECE channels (k0..k7) for the value
products `pv_piece`. On a GPU a piece is 64 channels: exactly one fp8_ds_mla NoPE group (one
UE8M0 scale per key, [K] work instead of [K, 64]) or its BF16 RoPE channels, and every tile
stays small (a [BLOCK_K, 64] entry piece, a [BLOCK_H, 64] product) so that 64 heads x 512
channels fit without spills. The interpreter, whose cost is per operation, takes one piece of
the whole row (read by `load_entries`, the same values).

DOT: 0 = fp32 product-and-sum (the interpreter); 1 = bf16 tensor cores on exact bf16 entries
(fp8_ds_mla and bf16 caches), fp32 queries split hi + lo (Q_PIECES = 2) and the probabilities
always (two dots, ~16 significant bits instead of 8); 2 = fp32 "ieee" dots (fp32 caches).
NATIVE_FP8 decodes e4m3fn codes with the GPU's conversion instead of bit arithmetic (both exact:
every finite code is a bf16 value). ALIGNED (the launcher checked that every entry's data starts
on 16 bytes): BF16/FP32 values are read as 16/32-bit words and the code loads vectorize.
"""

from __future__ import annotations

import triton
import triton.language as tl

from mxserve.kernels.attention_ops._cache_jit import e4m3fn_decode, entry_offsets, load_entries, ue8m0_to_fp32


@triton.jit
def piece_mask(rows_ok, c, G: tl.constexpr, PIECE: tl.constexpr, HEAD_DIM: tl.constexpr):
    """[R, PIECE] mask of rows_ok [R] and channels c < HEAD_DIM; the channel test only on the piece
    that crosses HEAD_DIM (a mask constant along the channels lets loads and stores vectorize)."""
    if (G + 1) * PIECE > HEAD_DIM:
        return rows_ok[:, None] & (c < HEAD_DIM)[None, :]
    return rows_ok[:, None] & (c >= 0)[None, :]


@triton.jit
def _bf16_row_values(row, c, m, ALIGNED: tl.constexpr):
    """Little-endian BF16 values at byte offsets 2*c of each row, as fp32 [K, C]."""
    if ALIGNED:
        bits = tl.load(row.to(tl.pointer_type(tl.int16)) + c[None, :], mask=m, other=0)
        return bits.to(tl.bfloat16, bitcast=True).to(tl.float32)
    b0 = tl.load(row + 2 * c[None, :], mask=m, other=0).to(tl.int32)
    b1 = tl.load(row + 2 * c[None, :] + 1, mask=m, other=0).to(tl.int32)
    return ((b0 | (b1 << 8)) << 16).to(tl.float32, bitcast=True)


@triton.jit
def kv_piece(buf, data_off, scale_off, valid, G: tl.constexpr, PIECE: tl.constexpr, MODE: tl.constexpr,
             HEAD_DIM: tl.constexpr, ALIGNED: tl.constexpr, NATIVE_FP8: tl.constexpr, DOT: tl.constexpr):
    """Channels PIECE*G .. PIECE*(G+1)-1 of the gathered entries, [K, PIECE] (bf16 for DOT 1, else
    fp32); 0 for invalid keys and channels past HEAD_DIM (the masked loads' `other` decodes to 0).
    The same values as `load_entries`, which reads any other piece width."""
    if G * PIECE < HEAD_DIM:
        c = G * PIECE + tl.arange(0, PIECE)
        m = piece_mask(valid, c, G, PIECE, HEAD_DIM)
        row = buf + data_off[:, None]
        if PIECE != 64:
            v = load_entries(buf, data_off, scale_off, valid, c, MODE, HEAD_DIM)
        elif MODE == 0:  # fp8_ds_mla: pieces 0..6 = NoPE groups (codes x UE8M0), piece 7 = BF16 RoPE
            if G < 7:
                code = tl.load(row + c[None, :], mask=m, other=0)
                if NATIVE_FP8:
                    v = code.to(tl.float8e4nv, bitcast=True).to(tl.float32)
                else:
                    v = e4m3fn_decode(code)
                sb = tl.load(buf + scale_off + G, mask=valid, other=127)
                v = v * ue8m0_to_fp32(sb)[:, None]  # one scale per key: [K] work, not [K, 64]
            else:
                v = _bf16_row_values(row + 448, c - 448, m, ALIGNED)
        elif MODE == 1:  # bf16 rows
            v = _bf16_row_values(row, c, m, ALIGNED)
        else:  # fp32 rows
            if ALIGNED:
                v = tl.load(row.to(tl.pointer_type(tl.float32)) + c[None, :], mask=m, other=0.0)
            else:
                b0 = tl.load(row + 4 * c[None, :], mask=m, other=0).to(tl.int32)
                b1 = tl.load(row + 4 * c[None, :] + 1, mask=m, other=0).to(tl.int32)
                b2 = tl.load(row + 4 * c[None, :] + 2, mask=m, other=0).to(tl.int32)
                b3 = tl.load(row + 4 * c[None, :] + 3, mask=m, other=0).to(tl.int32)
                v = (b0 | (b1 << 8) | (b2 << 16) | (b3 << 24)).to(tl.float32, bitcast=True)
        if DOT == 1:
            v = v.to(tl.bfloat16)  # exact: fp8 x power of two, or a BF16 value
    else:
        v = tl.zeros((1, 1), dtype=tl.float32)  # no such piece; never used
    return v


@triton.jit
def _qk_piece(s, q_rows, hm, k, G: tl.constexpr, PIECE: tl.constexpr, HEAD_DIM: tl.constexpr, DOT: tl.constexpr,
              Q_PIECES: tl.constexpr):
    """s + q[:, piece G] . k^T (q_rows: [BLOCK_H] row pointers of this token's heads)."""
    if G * PIECE < HEAD_DIM:
        c = G * PIECE + tl.arange(0, PIECE)
        q = tl.load(q_rows[:, None] + c[None, :], mask=piece_mask(hm, c, G, PIECE, HEAD_DIM), other=0.0)
        q = q.to(tl.float32)
        if DOT == 0:
            s += tl.sum(q[:, None, :] * k[None, :, :], axis=2)
        elif DOT == 1:
            q_hi = q.to(tl.bfloat16)
            s = tl.dot(q_hi, tl.trans(k), s)
            if Q_PIECES == 2:
                s = tl.dot((q - q_hi.to(tl.float32)).to(tl.bfloat16), tl.trans(k), s)
        else:
            s = tl.dot(q, tl.trans(k), s, input_precision="ieee")
    return s


@triton.jit
def attend_chunk(q_rows, hm, buf, slots_ptr, k_start, num_keys, block_size, page_stride, scale,
                 MODE: tl.constexpr, HEAD_DIM: tl.constexpr, DATA_BYTES: tl.constexpr, SCALE_BYTES: tl.constexpr,
                 BLOCK_H: tl.constexpr, BLOCK_K: tl.constexpr, PIECE: tl.constexpr, DOT: tl.constexpr,
                 Q_PIECES: tl.constexpr, ALIGNED: tl.constexpr, NATIVE_FP8: tl.constexpr):
    """The chunk of keys k_start..k_start+BLOCK_K-1 (columns >= num_keys and slot -1 are no key).

    Returns m [BLOCK_H], l [BLOCK_H], p [BLOCK_H, BLOCK_K] and the entry pieces k0..k7 (those
    past HEAD_DIM are placeholders)."""
    kk = k_start + tl.arange(0, BLOCK_K)
    slots = tl.load(slots_ptr + kk, mask=kk < num_keys, other=-1)
    valid = slots >= 0
    data_off, scale_off = entry_offsets(slots, block_size, page_stride, DATA_BYTES, SCALE_BYTES)
    if ALIGNED:
        data_off = tl.multiple_of(data_off, 16)
    # Every piece is gathered before the first product: the eight loads are independent, so they
    # are all in flight at once instead of one load latency per piece in series (a decode chunk is
    # latency-bound: session 4 measured ~25 us per launch whatever the key count). The pieces stay
    # live for the value products anyway, and the sums run in the same order as before.
    k0 = kv_piece(buf, data_off, scale_off, valid, 0, PIECE, MODE, HEAD_DIM, ALIGNED, NATIVE_FP8, DOT)
    if PIECE < HEAD_DIM:
        k1 = kv_piece(buf, data_off, scale_off, valid, 1, PIECE, MODE, HEAD_DIM, ALIGNED, NATIVE_FP8, DOT)
        k2 = kv_piece(buf, data_off, scale_off, valid, 2, PIECE, MODE, HEAD_DIM, ALIGNED, NATIVE_FP8, DOT)
        k3 = kv_piece(buf, data_off, scale_off, valid, 3, PIECE, MODE, HEAD_DIM, ALIGNED, NATIVE_FP8, DOT)
        k4 = kv_piece(buf, data_off, scale_off, valid, 4, PIECE, MODE, HEAD_DIM, ALIGNED, NATIVE_FP8, DOT)
        k5 = kv_piece(buf, data_off, scale_off, valid, 5, PIECE, MODE, HEAD_DIM, ALIGNED, NATIVE_FP8, DOT)
        k6 = kv_piece(buf, data_off, scale_off, valid, 6, PIECE, MODE, HEAD_DIM, ALIGNED, NATIVE_FP8, DOT)
        k7 = kv_piece(buf, data_off, scale_off, valid, 7, PIECE, MODE, HEAD_DIM, ALIGNED, NATIVE_FP8, DOT)
    s = _qk_piece(tl.zeros((BLOCK_H, BLOCK_K), dtype=tl.float32), q_rows, hm, k0, 0, PIECE, HEAD_DIM, DOT, Q_PIECES)
    if PIECE < HEAD_DIM:
        s = _qk_piece(s, q_rows, hm, k1, 1, PIECE, HEAD_DIM, DOT, Q_PIECES)
        s = _qk_piece(s, q_rows, hm, k2, 2, PIECE, HEAD_DIM, DOT, Q_PIECES)
        s = _qk_piece(s, q_rows, hm, k3, 3, PIECE, HEAD_DIM, DOT, Q_PIECES)
        s = _qk_piece(s, q_rows, hm, k4, 4, PIECE, HEAD_DIM, DOT, Q_PIECES)
        s = _qk_piece(s, q_rows, hm, k5, 5, PIECE, HEAD_DIM, DOT, Q_PIECES)
        s = _qk_piece(s, q_rows, hm, k6, 6, PIECE, HEAD_DIM, DOT, Q_PIECES)
        s = _qk_piece(s, q_rows, hm, k7, 7, PIECE, HEAD_DIM, DOT, Q_PIECES)
    else:  # one piece holds the whole row (the interpreter): no calls for the others (its cost is per call)
        k1, k2, k3, k4, k5, k6, k7 = k0, k0, k0, k0, k0, k0, k0
    s = tl.where(valid[None, :], s * scale, float("-inf"))
    m = tl.maximum(tl.max(s, axis=1), -1e30)  # finite: exp(-inf - m) stays 0, never NaN
    p = tl.exp(s - m[:, None])
    return m, tl.sum(p, axis=1), p, k0, k1, k2, k3, k4, k5, k6, k7


@triton.jit
def pv_piece(p, k, DOT: tl.constexpr):
    """p [BLOCK_H, BLOCK_K] . k [BLOCK_K, PIECE] in fp32 (DOT 1: p split hi + lo, two bf16 dots)."""
    if DOT == 0:
        return tl.sum(p[:, :, None] * k[None, :, :], axis=1)
    elif DOT == 1:
        p_hi = p.to(tl.bfloat16)
        p_lo = (p - p_hi.to(tl.float32)).to(tl.bfloat16)
        return tl.dot(p_lo, k, tl.dot(p_hi, k))
    else:
        return tl.dot(p, k, input_precision="ieee")
