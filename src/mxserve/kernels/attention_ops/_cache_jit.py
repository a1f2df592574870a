"""Private @triton.jit helpers: cache addressing and the entry codecs, in registers.

`entry_offsets` restates `PageLayout.addresses` (the one address function):
    data(slot)  = block_id * stride + pos * DATA_BYTES
    scale(slot) = block_id * stride + B * DATA_BYTES + pos * SCALE_BYTES
and the tests pin it against the cache object's writer/reader at page boundaries with strides
that are not multiples of anything. Entry values are moved byte by byte: the allocator's stride
may be odd (then no wider load is aligned), and little-endian byte assembly is exactly the
format's definition.

The e4m3fn/UE8M0 conversions are integer bit arithmetic, identical under the interpreter and on
any GPU (no dependence on a native FP8 conversion's rounding or saturation mode): encode is
round-to-nearest-even of a value already clamped to [-448, 448], sign kept (so -0 and tiny
negatives give 0x80, as `mxserve.formats.encode` does); decode is exact for every finite code.
"""

from __future__ import annotations

import triton
import triton.language as tl

MODE_DS_MLA: tl.constexpr = tl.constexpr(0)
MODE_BF16: tl.constexpr = tl.constexpr(1)
MODE_FP32: tl.constexpr = tl.constexpr(2)
MODE_INDEXER_FP8: tl.constexpr = tl.constexpr(3)


@triton.jit
def round_bf16(x):
    """fp32 -> the nearest BF16 value (ties to even), still as fp32. Bit arithmetic because the
    interpreter's fp32->bf16 cast truncates (seen with triton 3.9) while GPUs round to nearest.
    A NaN stays a NaN: the GPU's own NaN is 0x7FFFFFFF, which the carry of the rounding add would
    turn into -0.0 (and a NaN with only low payload bits into inf), hiding a fault from every
    finiteness check downstream (H200, session 6 call 4: the shared SwiGLU's GPU bit test)."""
    bits = x.to(tl.int32, bitcast=True)
    r = (bits + 0x7FFF + ((bits >> 16) & 1)) & -65536  # & 0xFFFF0000
    return tl.where(x != x, x, r.to(tl.float32, bitcast=True))


@triton.jit
def entry_offsets(slots, BLOCK_SIZE, STRIDE, DATA_BYTES: tl.constexpr, SCALE_BYTES: tl.constexpr):
    """(data, scale) byte offsets of global slots (int64); callers mask slot -1 themselves."""
    s = tl.maximum(slots.to(tl.int64), 0)
    block = s // BLOCK_SIZE
    pos = s - block * BLOCK_SIZE
    page = block * STRIDE
    return page + pos * DATA_BYTES, page + BLOCK_SIZE * DATA_BYTES + pos * SCALE_BYTES


@triton.jit
def ue8m0_to_fp32(b):
    """2^(b-127) from its bit pattern (byte 0 -> the subnormal 2^-127, 255 -> NaN)."""
    b = b.to(tl.int32)
    bits = tl.where(b == 0, 0x00400000, tl.where(b == 255, 0x7FC00000, b << 23))
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def e4m3fn_decode(code):
    """e4m3fn code bytes -> fp32 values (exact); the NaN codes 0x7F/0xFF -> NaN (a NaN written by
    `e4m3fn_encode` reads back as one, as torch's float8_e4m3fn view does)."""
    c = code.to(tl.int32)
    e = (c >> 3) & 0xF
    m = c & 7
    normal = (((e + 120) << 23) | (m << 20)).to(tl.float32, bitcast=True)
    normal = tl.where((c & 0x7F) == 0x7F, float("nan"), normal)
    mag = tl.where(e == 0, m.to(tl.float32) * 0.001953125, normal)  # subnormal: m * 2^-9
    return tl.where((c & 0x80) != 0, -mag, mag)


@triton.jit
def e4m3fn_encode(v):
    """fp32 values in [-448, 448] (or NaN) -> e4m3fn codes (int32 0..255), round to nearest even;
    NaN -> the NaN code 0x7F with v's sign bit, as torch's cast gives."""
    bits = v.to(tl.int32, bitcast=True)
    a_bits = bits & 0x7FFFFFFF
    a = a_bits.to(tl.float32, bitcast=True)
    # normal range (|v| >= 2^-6): keep 3 mantissa bits, ties to even, carry into the exponent
    r = (a_bits + 0x7FFFF + ((a_bits >> 20) & 1)) & -1048576  # & 0xFFF00000
    normal = ((((r >> 23) - 120) << 3) | ((r >> 20) & 7))
    # subnormal range: m = rne(|v| * 2^9) in 0..8 (8 is the smallest normal code, also right)
    sub = ((a * 512.0 + 8388608.0) - 8388608.0).to(tl.int32)
    code = tl.where(a < 0.015625, sub, normal)
    code = tl.where(v != v, 0x7F, code)
    return code | tl.where(bits < 0, 0x80, 0)


@triton.jit
def clamp_e4m3fn_range(v):
    """v clamped to [-448, 448] with NaN kept (tl.minimum/maximum would return the bound)."""
    return tl.where(v != v, v, tl.minimum(tl.maximum(v, -448.0), 448.0))


@triton.jit
def nan_aware_amax(v, axis):
    """max |v| along `axis`, NaN where that slice holds a NaN (torch's amax; a GPU max drops NaNs)."""
    amax = tl.max(tl.abs(v), axis=axis)
    return tl.where(tl.max((v != v).to(tl.int32), axis=axis) > 0, float("nan"), amax)


@triton.jit
def pow2_ceil_exp(amax):
    """ceil(log2(max(amax, 1e-4) / 448)) from the fp32 ratio's bits, as the reference; 127 when
    the ratio is not finite."""
    ratio = tl.math.div_rn(tl.maximum(amax, 1e-4), 448.0)
    rb = ratio.to(tl.int32, bitcast=True)
    e = ((rb >> 23) & 0xFF) - 127 + ((rb & 0x7FFFFF) != 0).to(tl.int32)
    return tl.where(ratio < float("inf"), e, 127)


@triton.jit
def load_entries(buf, data_off, scale_off, valid, cols, MODE: tl.constexpr, HEAD_DIM: tl.constexpr):
    """Gather and decode entries: fp32 [K, D] for offsets [K], columns [D]; 0 where not valid."""
    vm = valid[:, None] & (cols < HEAD_DIM)[None, :]
    row = buf + data_off[:, None]
    if MODE == 0:  # fp8_ds_mla
        is_nope = cols < 448
        first = tl.where(is_nope, cols, 448 + 2 * (cols - 448))
        b0 = tl.load(row + first[None, :], mask=vm, other=0).to(tl.int32)
        b1 = tl.load(row + first[None, :] + 1, mask=vm & (~is_nope)[None, :], other=0).to(tl.int32)
        sb = tl.load(buf + scale_off[:, None] + tl.minimum(cols // 64, 6)[None, :],
                     mask=vm & is_nope[None, :], other=127)
        nope = e4m3fn_decode(b0) * ue8m0_to_fp32(sb)
        rope = ((b0 | (b1 << 8)) << 16).to(tl.float32, bitcast=True)
        val = tl.where(is_nope[None, :], nope, rope)
    elif MODE == 1:  # bf16 rows
        b0 = tl.load(row + 2 * cols[None, :], mask=vm, other=0).to(tl.int32)
        b1 = tl.load(row + 2 * cols[None, :] + 1, mask=vm, other=0).to(tl.int32)
        val = ((b0 | (b1 << 8)) << 16).to(tl.float32, bitcast=True)
    elif MODE == 2:  # fp32 rows
        b0 = tl.load(row + 4 * cols[None, :], mask=vm, other=0).to(tl.int32)
        b1 = tl.load(row + 4 * cols[None, :] + 1, mask=vm, other=0).to(tl.int32)
        b2 = tl.load(row + 4 * cols[None, :] + 2, mask=vm, other=0).to(tl.int32)
        b3 = tl.load(row + 4 * cols[None, :] + 3, mask=vm, other=0).to(tl.int32)
        val = (b0 | (b1 << 8) | (b2 << 16) | (b3 << 24)).to(tl.float32, bitcast=True)
    else:  # FP8 indexer key: codes + one little-endian fp32 scale per entry
        b0 = tl.load(row + cols[None, :], mask=vm, other=0)
        s0 = tl.load(buf + scale_off, mask=valid, other=0).to(tl.int32)
        s1 = tl.load(buf + scale_off + 1, mask=valid, other=0).to(tl.int32)
        s2 = tl.load(buf + scale_off + 2, mask=valid, other=0).to(tl.int32)
        s3 = tl.load(buf + scale_off + 3, mask=valid, other=0).to(tl.int32)
        scale = (s0 | (s1 << 8) | (s2 << 16) | (s3 << 24)).to(tl.float32, bitcast=True)
        val = e4m3fn_decode(b0) * scale[:, None]
    return tl.where(vm, val, 0.0)


@triton.jit
def store_entry(buf, data_off, scale_off, x, cols, ok, MODE: tl.constexpr, HEAD_DIM: tl.constexpr,
                BLOCK_D: tl.constexpr):
    """Encode one entry x (fp32 [BLOCK_D], columns `cols`) and store it if `ok` (scalar bool).

    ds_mla: x rounded to BF16, 7 NoPE groups of 64 quantized with power-of-two scales, RoPE
    channels stored as BF16 (spec §8.1). Indexer FP8: one power-of-two fp32 scale per key.
    """
    # `ok` is broadcast through integer arithmetic: the interpreter rejects a store mask made by
    # `tensor & scalar_bool` (triton 3.9).
    oki = ok.to(tl.int32)
    cm = (cols < HEAD_DIM) & ((cols * 0 + oki) > 0)
    if MODE == 0:
        xb = round_bf16(x)
        g = tl.reshape(xb, (8, 64))
        grp = tl.arange(0, 8)
        amax = nan_aware_amax(g, 1)  # a NaN group gets scale byte 254 and NaN codes, as the twin writes
        sbyte = tl.minimum(tl.maximum(pow2_ceil_exp(amax) + 127, 0), 254)
        q = tl.math.div_rn(g, ue8m0_to_fp32(sbyte)[:, None])
        codes = e4m3fn_encode(clamp_e4m3fn_range(q))
        c64 = tl.arange(0, 64)
        nope_off = grp[:, None] * 64 + c64[None, :]
        full = (nope_off * 0 + oki) > 0
        tl.store(buf + data_off + nope_off, codes.to(tl.uint8), mask=full & (grp < 7)[:, None])
        rbits = (g.to(tl.int32, bitcast=True) >> 16) & 0xFFFF
        rope_off = 448 + 2 * c64[None, :] + grp[:, None] * 0
        rmask = full & (grp == 7)[:, None]
        tl.store(buf + data_off + rope_off, (rbits & 0xFF).to(tl.uint8), mask=rmask)
        tl.store(buf + data_off + rope_off + 1, (rbits >> 8).to(tl.uint8), mask=rmask)
        tl.store(buf + scale_off + grp, tl.where(grp < 7, sbyte, 0).to(tl.uint8), mask=(grp * 0 + oki) > 0)
    elif MODE == 1:
        bits = (round_bf16(x).to(tl.int32, bitcast=True) >> 16) & 0xFFFF
        tl.store(buf + data_off + 2 * cols, (bits & 0xFF).to(tl.uint8), mask=cm)
        tl.store(buf + data_off + 2 * cols + 1, (bits >> 8).to(tl.uint8), mask=cm)
    elif MODE == 2:
        bits = x.to(tl.int32, bitcast=True)
        tl.store(buf + data_off + 4 * cols, (bits & 0xFF).to(tl.uint8), mask=cm)
        tl.store(buf + data_off + 4 * cols + 1, ((bits >> 8) & 0xFF).to(tl.uint8), mask=cm)
        tl.store(buf + data_off + 4 * cols + 2, ((bits >> 16) & 0xFF).to(tl.uint8), mask=cm)
        tl.store(buf + data_off + 4 * cols + 3, ((bits >> 24) & 0xFF).to(tl.uint8), mask=cm)
    else:
        amax = nan_aware_amax(tl.where(cols < HEAD_DIM, x, 0.0), 0)
        e = pow2_ceil_exp(amax)
        scale = ((tl.minimum(tl.maximum(e, -126), 127) + 127) << 23).to(tl.float32, bitcast=True)
        codes = e4m3fn_encode(clamp_e4m3fn_range(tl.math.div_rn(x, scale)))
        tl.store(buf + data_off + cols, codes.to(tl.uint8), mask=cm)
        sbits = scale.to(tl.int32, bitcast=True)
        four = tl.arange(0, 4)
        tl.store(buf + scale_off + four, ((sbits >> (8 * four)) & 0xFF).to(tl.uint8), mask=(four * 0 + oki) > 0)
