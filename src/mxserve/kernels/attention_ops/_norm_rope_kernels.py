"""Private Triton kernels of the fused norm/RoPE/insert ops; launched only through `triton_ops.py`.

Vectors are held as [pairs, 2] tiles (column = 2*pair + j), so the interleaved RoPE pairs
(2i, 2i+1) of spec §2 sit in one row and rotate without any register shuffle.

Numerics mirror the torch twins step by step so the results are bit-identical to them in
practice: mean of squares in fp64 (as `mxserve.model.norms`), multiplies in fp32 in the same
order, casts to the stream dtype at the same points, RoPE angle as an fp32 product with cos/sin
taken in fp64 and rounded once (as `mxserve.model.rope`). Launchers pass enable_fp_fusion=False
so the GPU does not contract a*b - c*d into an FMA the twin does not do. The compressor's pooling
is its own kernel (`_compressor_pool_kernel`); its pooled rows are inserted by `_kv_insert_kernel`.
"""

from __future__ import annotations

import triton
import triton.language as tl

from mxserve.kernels.attention_ops._cache_jit import entry_offsets, round_bf16, store_entry
from mxserve.kernels.early_start import wait_for_previous


@triton.jit
def _rms_scale(x, HEAD_DIM: tl.constexpr, eps):
    """rsqrt(mean(x²) + eps) with the mean in fp64, rounded once to fp32 (x: masked zeros)."""
    x64 = x.to(tl.float64)
    ms = tl.sum(tl.sum(x64 * x64, axis=1), axis=0) / HEAD_DIM
    return (1.0 / tl.sqrt(ms + eps)).to(tl.float32)


@triton.jit
def _round_to(x, OUT_BF16: tl.constexpr):
    if OUT_BF16:
        return round_bf16(x)
    return x


@triton.jit
def _rope_pairs(x, pos, inv_freq_ptr, ROPE_START: tl.constexpr, ROPE_PAIRS: tl.constexpr,
                BLOCK_P: tl.constexpr, INVERSE: tl.constexpr):
    """Rotate pairs ROPE_START .. ROPE_START+ROPE_PAIRS-1 of x [BLOCK_P, 2] by ±pos*f_i (fp32)."""
    pair = tl.arange(0, BLOCK_P)
    j = tl.arange(0, 2)
    i = pair - ROPE_START
    is_rope = (i >= 0) & (i < ROPE_PAIRS)
    f = tl.load(inv_freq_ptr + tl.where(is_rope, i, 0), mask=is_rope, other=0.0)
    ang = pos.to(tl.float32) * f
    c = tl.cos(ang.to(tl.float64)).to(tl.float32)
    s = tl.sin(ang.to(tl.float64)).to(tl.float32)
    if INVERSE:
        s = -s
    ev = tl.sum(tl.where(j[None, :] == 0, x, 0.0), axis=1)
    od = tl.sum(tl.where(j[None, :] == 1, x, 0.0), axis=1)
    new_e = ev * c - od * s
    new_o = ev * s + od * c
    rot = tl.where(j[None, :] == 0, new_e[:, None], new_o[:, None])
    return tl.where(is_rope[:, None], rot, x)


@triton.jit
def _head_norm_rope_kernel(
    x_ptr, out_ptr, pos_ptr, inv_freq_ptr, H, stride_xt, stride_xh, stride_ot, stride_oh, eps,
    HEAD_DIM: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_H: tl.constexpr, ROPE_PAIRS: tl.constexpr,
    DO_NORM: tl.constexpr, INVERSE: tl.constexpr, OUT_BF16: tl.constexpr, ROUND_IN: tl.constexpr = False,
    PDL: tl.constexpr = False,  # early start: kernels/early_start.py
):
    """out[t, h] = rope(unweighted_rms(x[t, h])) (or just rope / inverse rope) for BLOCK_H heads
    of one token per program, as [BLOCK_H, pairs, 2] tiles (same arithmetic as `_rope_pairs`).
    ROUND_IN: x (fp32) is first rounded to the output dtype (the twin's `.to(out_dtype)` before it)."""
    wait_for_previous(PDL)  # before any load or store (kernels/early_start.py)
    t = tl.program_id(0)
    hh = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    pair = tl.arange(0, BLOCK_P)
    j = tl.arange(0, 2)
    cols = 2 * pair[:, None] + j[None, :]  # [P, 2]
    m = (hh < H)[:, None, None] & (cols < HEAD_DIM)[None, :, :]
    x = tl.load(x_ptr + t * stride_xt + hh[:, None, None] * stride_xh + cols[None, :, :], mask=m, other=0.0)
    x = x.to(tl.float32)
    if ROUND_IN:
        x = _round_to(x, OUT_BF16)
    if DO_NORM:
        x64 = x.to(tl.float64)
        ms = tl.sum(tl.sum(x64 * x64, axis=2), axis=1) / HEAD_DIM
        r = (1.0 / tl.sqrt(ms + eps)).to(tl.float32)
        x = _round_to(x * r[:, None, None], OUT_BF16)
    i = pair - (HEAD_DIM // 2 - ROPE_PAIRS)
    is_rope = (i >= 0) & (i < ROPE_PAIRS)
    f = tl.load(inv_freq_ptr + tl.where(is_rope, i, 0), mask=is_rope, other=0.0)
    ang = tl.load(pos_ptr + t).to(tl.float32) * f
    c = tl.cos(ang.to(tl.float64)).to(tl.float32)[None, :]
    s = tl.sin(ang.to(tl.float64)).to(tl.float32)[None, :]
    if INVERSE:
        s = -s
    ev = tl.sum(tl.where(j[None, None, :] == 0, x, 0.0), axis=2)
    od = tl.sum(tl.where(j[None, None, :] == 1, x, 0.0), axis=2)
    new_e = ev * c - od * s
    new_o = ev * s + od * c
    rot = tl.where(j[None, None, :] == 0, new_e[:, :, None], new_o[:, :, None])
    y = _round_to(tl.where(is_rope[None, :, None], rot, x), OUT_BF16)
    tl.store(out_ptr + t * stride_ot + hh[:, None, None] * stride_oh + cols[None, :, :],
             y.to(out_ptr.dtype.element_ty), mask=m)


@triton.jit
def _norm_rope_store(x, w_ptr, pos, inv_freq_ptr, buf, slot, block_size, stride, eps,
                     HEAD_DIM: tl.constexpr, BLOCK_P: tl.constexpr, ROPE_PAIRS: tl.constexpr,
                     OUT_BF16: tl.constexpr, MODE: tl.constexpr, DATA_BYTES: tl.constexpr,
                     SCALE_BYTES: tl.constexpr):
    """rms_norm(x; w) in the stream dtype, RoPE at `pos`, encode, store at `slot` (if >= 0)."""
    cols = 2 * tl.arange(0, BLOCK_P)[:, None] + tl.arange(0, 2)[None, :]
    cm = cols < HEAD_DIM
    w = tl.load(w_ptr + cols, mask=cm, other=0.0).to(tl.float32)
    y = _round_to((x * _rms_scale(x, HEAD_DIM, eps)) * w, OUT_BF16)
    y = _round_to(_rope_pairs(y, pos, inv_freq_ptr, HEAD_DIM // 2 - ROPE_PAIRS, ROPE_PAIRS, BLOCK_P, False),
                  OUT_BF16)
    data_off, scale_off = entry_offsets(slot, block_size, stride, DATA_BYTES, SCALE_BYTES)
    store_entry(buf, data_off, scale_off, tl.reshape(y, (2 * BLOCK_P,)), tl.reshape(cols, (2 * BLOCK_P,)),
                slot >= 0, MODE, HEAD_DIM, 2 * BLOCK_P)


@triton.jit
def _kv_insert_kernel(
    x_ptr, w_ptr, pos_ptr, slot_ptr, inv_freq_ptr, buf, block_size, stride, stride_xt, eps,
    HEAD_DIM: tl.constexpr, BLOCK_P: tl.constexpr, ROPE_PAIRS: tl.constexpr, OUT_BF16: tl.constexpr,
    MODE: tl.constexpr, DATA_BYTES: tl.constexpr, SCALE_BYTES: tl.constexpr,
    PDL: tl.constexpr = False,  # early start: kernels/early_start.py
):
    """Row t (window KV, or a pooled compressor entry): norm + RoPE + encode + insert at slot[t];
    slot -1 (a padding lane, a token that completes no entry) returns at once, nothing written."""
    wait_for_previous(PDL)  # before any load or store (kernels/early_start.py)
    t = tl.program_id(0)
    slot = tl.load(slot_ptr + t)
    if slot >= 0:
        cols = 2 * tl.arange(0, BLOCK_P)[:, None] + tl.arange(0, 2)[None, :]
        x = tl.load(x_ptr + t * stride_xt + cols, mask=cols < HEAD_DIM, other=0.0).to(tl.float32)
        _norm_rope_store(x, w_ptr, tl.load(pos_ptr + t), inv_freq_ptr, buf, slot, block_size, stride,
                         eps, HEAD_DIM, BLOCK_P, ROPE_PAIRS, OUT_BF16, MODE, DATA_BYTES, SCALE_BYTES)
