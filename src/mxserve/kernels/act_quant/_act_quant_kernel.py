"""Private Triton code of the faithful FP8 activation quantization; launched only through `triton.py`.

The JIT helpers here are also the in-kernel quantizers of other kernels (the MoE hidden state),
so every FP8 power-of-two quantization on the GPU rounds the same way as `formats.fake_quant_pow2`:
  amax = max(|x| over the block, 1e-4);  e = ceil(log2(amax / 448)) from the float32 ratio's bits
  (a non-finite amax gives e = 127, as the reference);  q = RNE(clamp(x · 2^-e, ±448)) to e4m3fn
  with the sign kept (−0 stays −0) and NaN propagated;  value = q · 2^e.
Multiplying by 2^-e is the reference's division by 2^e exactly (both are the correctly rounded
result of the same real number), and it avoids the GPU's approximate fp32 division.
"""

from __future__ import annotations

import triton
import triton.language as tl

from mxserve.kernels.early_start import wait_for_previous

MAGIC_RNE = tl.constexpr(12582912.0)  # 1.5 · 2^23: (v + M) − M rounds 0 <= v < 2^22 to an integer, ties to even


@triton.jit
def exp2_bits(e):
    """2^e as fp32 for integer e in [-127, 127], from its bit pattern (e = -127: the subnormal 2^-127)."""
    return tl.where(e >= -126, (e + 127) << 23, 0x00400000).to(tl.float32, bitcast=True)


@triton.jit
def pow2_scale_exponent(amax):
    """ceil(log2(max(amax, 1e-4) / 448)) as int32 for amax >= 0; 127 where amax is inf (callers
    pass their NaN rows separately: a GPU max reduction drops NaN)."""
    # correctly rounded, as torch's float32 division: Triton's `/` is the approximate div.full.f32,
    # which can move a ratio near a power of two across it and change the scale
    ratio = tl.div_rn(tl.maximum(amax, 1e-4), 448.0)
    bits = ratio.to(tl.int32, bitcast=True)
    biased = (bits >> 23) & 255
    e = biased - 127 + tl.where((bits & 0x7FFFFF) != 0, 1, 0)
    return tl.where(biased != 255, e, 127)


@triton.jit
def round_e4m3(v):
    """fp32 v with |v| <= 448 or NaN → the nearest e4m3fn value (ties to even), sign kept, in fp32."""
    bits = v.to(tl.int32, bitcast=True)
    a = (bits & 0x7FFFFFFF).to(tl.float32, bitcast=True)
    e = tl.maximum(((bits >> 23) & 255) - 127, -6)  # subnormal e4m3 values share the ulp 2^-9
    ulp = ((e - 3 + 127) << 23).to(tl.float32, bitcast=True)
    inv_ulp = ((127 - (e - 3)) << 23).to(tl.float32, bitcast=True)
    r = ((a * inv_ulp + MAGIC_RNE) - MAGIC_RNE) * ulp
    return (r.to(tl.int32, bitcast=True) | (bits & -2147483648)).to(tl.float32, bitcast=True)


@triton.jit
def clamp_e4m3(v):
    """clamp(v, ±448) with NaN kept (torch.clamp's behaviour)."""
    return tl.minimum(tl.maximum(v, -448.0, propagate_nan=tl.PropagateNan.ALL), 448.0,
                      propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def quantize_rows_e4m3(x):
    """[rows, BLOCK] fp32 (masked-out elements 0) → (q [rows, BLOCK] fp32 e4m3fn values, e [rows]
    int32) with x ≈ q · 2^e, one scale per row: THE faithful block quantization, shared by the
    standalone launch below and the W8A8 linear's in-kernel quantization (X_MODE 4 of
    `linear_fp8_block`), so both produce the same codes and scales by construction."""
    amax = tl.max(tl.abs(x), axis=1)
    has_nan = tl.max((x != x).to(tl.int32), axis=1) > 0  # the reference's NaN amax → the largest scale
    e = tl.where(has_nan, 127, pow2_scale_exponent(amax))
    q = round_e4m3(clamp_e4m3(x * exp2_bits(-e)[:, None]))
    return q, e


@triton.jit(do_not_specialize=["M"])  # run-time sizes: one compile for every value
def _act_quant_fp8_kernel(
    x_ptr, out_ptr, scale_ptr, M, K, stride_xm, stride_om, stride_sm,
    BLOCK_K: tl.constexpr, ROWS: tl.constexpr, CODES: tl.constexpr,
    PDL: tl.constexpr = False,  # early start: kernels/early_start.py
):
    """Program (row tile, K block): quantize ROWS x BLOCK_K elements with one scale per row.
    CODES: store e4m3fn codes (uint8) and the fp32 scales 2^e; else store q · 2^e in out's dtype."""
    wait_for_previous(PDL)  # before any load or store (kernels/early_start.py)
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    kb = tl.program_id(1)
    cols = kb * BLOCK_K + tl.arange(0, BLOCK_K)
    mask = (rows < M)[:, None] & (cols < K)[None, :]
    x = tl.load(x_ptr + rows[:, None].to(tl.int64) * stride_xm + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    q, e = quantize_rows_e4m3(x)
    if CODES:
        out = out_ptr + rows[:, None].to(tl.int64) * stride_om + cols[None, :]
        tl.store(out, q.to(tl.float8e4nv).to(tl.uint8, bitcast=True), mask=mask)
        tl.store(scale_ptr + rows * stride_sm + kb, exp2_bits(e), mask=rows < M)
    else:
        out = out_ptr + rows[:, None].to(tl.int64) * stride_om + cols[None, :]
        tl.store(out, (q * exp2_bits(e)[:, None]).to(out_ptr.dtype.element_ty), mask=mask)
