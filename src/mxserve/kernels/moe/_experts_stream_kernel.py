"""Private Triton code of the streaming decode of the MXFP4 experts (variant "bf16-stream").

Why it exists (issue 10, H200): the split decode (`_experts_split_kernel.py`) streamed at 1.1-1.2
TB/s. Its K loop (sm_90 TTGIR) pipelines only the weight codes (cp.async, one block ahead); the
group scales (64 x 4 bytes: too narrow for cp.async) and the activations (even and odd columns:
2-byte gathers) are plain loads inside the loop, so every 128-K block waits one DRAM round trip
for its scales: ~1.1-1.3 us a block at 3 programs per SM, which is the measured rate. And one
token took 7 launches (fake quantization, out memset, sort, gate/up, SwiGLU, down, combine).
Here, with the same arithmetic:

* the 4 UE8M0 bytes of a row's 128-K block are read as ONE int32 (the scales viewed as int32
  [E, N, K/128]) and the activations as two contiguous 64-column halves of a copy of x stored in
  even-then-odd order per 128-block (`_moe_stream_prep_kernel`; the down kernel reads h, which the
  gate/up kernel writes in that order): every load of the K loop is 4-16 bytes a thread, so Triton
  pipelines all of them (num_stages - 1 blocks in flight) and nothing in the loop waits on DRAM;
* no sort: program (n-tile, p, ...) belongs to pair p and works only if p leads a run of
  BLOCK_M pairs of its expert (its rank among the expert's pairs, ascending pair id, is a
  multiple of BLOCK_M); its rows are the next BLOCK_M pairs of that expert. Exactly the row
  blocks of `align.py`, found from the expert ids by each program (a few hundred ids at most);
* the SwiGLU epilogue runs in the last of the 4 gate/up programs of a 128-channel block to arrive,
  and the top-k combine in the last down program of a (token, 64-feature tile) to arrive
  (acq_rel arrival counters; the pattern and why it is correct: `linear_fp8_block`'s kernel
  docstring, "Fused sum"). The prep kernel zeroes the counters, so none persist between calls.
  One call = 3 launches: prep, gate/up, down;
* the nibbles are widened 4 code bytes per inline-asm instance (`_E2M1_QUADS_PTX`), gate and up
  share one loop body (one set of shared-memory buffers), and (opt-in, CONFIG "pdl") gate/up and
  down start as programmatic dependent launches that prefetch their first weight blocks into L2
  while the previous kernel finishes.
sm_90 compile (Triton 3.9, `tests/kernels/moe/sm90_compile_experts.py`): every K-loop load a
cp.async, 0 plain loads in the loop (split kernel: 3 in down, 6 in gate/up); 278 / 293 K-loop
instructions per warp per 128-K block in down / gate/up = 0.27 / 0.29 warp instructions per weight
byte (split: 0.33); 96 registers, no spills, 37-46 KB shared memory at 3-4 stages.
What is left per block: ~145 instructions of nibble decode and scale products (3.5 + 1 per bf16
pair: near the floor of this bit-placement widening), ~20 moving the widened tile into the wgmma
operand layout through shared memory, ~110 of pipeline bookkeeping, barriers and wgmma fences.

Bit-identity with "bf16-split" / "bf16-fused": the weights are the same exact bf16 values (the
split kernel's `_mxfp4_block_bf16`), the activations the same values (the fake quantization of
`act_quant`, op for op), each output element's sum runs over K in the same order (128-K blocks in
order, the even then the odd half, the same `_dot_part` on the same 64x64 wgmma tile), the hidden
state comes from the same `_swiglu_values`, and the combine adds a token's k rows in the same
order as `_moe_combine_kernel`. Rows stay batch invariant: nothing a row computes depends on the
other rows of its block.
"""

from __future__ import annotations

import triton
import triton.language as tl

from mxserve.kernels.act_quant._act_quant_kernel import clamp_e4m3, exp2_bits, pow2_scale_exponent, round_e4m3
from mxserve.kernels.moe._experts_kernel import _dot_part, _swiglu_values
from mxserve.kernels.moe._experts_split_kernel import _mxfp4_block_bf16

_NO_EXPERT = tl.constexpr(0x7FFFFFFFFFFF)  # a sort key above every (expert, slot) key

# `_E2M1_PAIRS_PTX`'s bit arithmetic on 4 code bytes at once ($4, byte i = element i): low nibbles
# of bytes 0, 1 → $0 and of bytes 2, 3 → $1 (bf16 pairs, element 2i in the low half), high nibbles
# → $2, $3. prmt 0x4140 / 0x4342 spread bytes 0, 1 / 2, 3 into the two halves, then as the pairs
# version. Same bits per nibble; it takes the code word as loaded (4 bytes a register) where the
# pairs version made Triton first cut every register into 16-bit pieces (~4 instructions a pair).
_E2M1_QUADS_PTX = tl.constexpr("""
{
.reg .b32 t, n;
prmt.b32 t, $4, 0, 0x4140;
and.b32 n, t, 0x000F000F;
mul.lo.u32 n, n, 0x1040;
and.b32 $0, n, 0x81C081C0;
and.b32 n, t, 0x00F000F0;
mul.lo.u32 n, n, 0x104;
and.b32 $2, n, 0x81C081C0;
prmt.b32 t, $4, 0, 0x4342;
and.b32 n, t, 0x000F000F;
mul.lo.u32 n, n, 0x1040;
and.b32 $1, n, 0x81C081C0;
and.b32 n, t, 0x00F000F0;
mul.lo.u32 n, n, 0x104;
and.b32 $3, n, 0x81C081C0;
}
""")


@triton.jit
def _mxfp4_quads_bf16(wb, sb, BLOCK_N: tl.constexpr, USE_ASM: tl.constexpr):
    """`_mxfp4_block_bf16` (the same values) with the nibble decode 4 bytes per instance."""
    if USE_ASM:
        lo, hi = tl.inline_asm_elementwise(_E2M1_QUADS_PTX, "=r,=r,=r,=r,r", [wb], dtype=(tl.bfloat16, tl.bfloat16),
                                           is_pure=True, pack=4)
        scale = ((sb.to(tl.int16) + 126) << 7).to(tl.bfloat16, bitcast=True)  # 2^(b-1), b <= 128
        scale = tl.reshape(tl.broadcast_to(scale[:, :, None], (BLOCK_N, 4, 16)), (BLOCK_N, 64))
        return lo * scale, hi * scale  # exact products
    else:
        return _mxfp4_block_bf16(wb, sb, BLOCK_N, USE_ASM)


@triton.jit
def _even_odd(j):
    """Position of column j of a 128-column block when the block is stored even columns first."""
    return (j % 2) * 64 + j // 2


@triton.jit
def _mma_pos(j):
    """Position of column j of a 128-column block in the order of variant "bf16-stream-splitk": even
    columns first, and within each half code byte i = j // 2 = 16c + 4m + 2h + p at 16m + 8h + 2c + p,
    the K index its decoded weight has in the wgmma operand registers (`_experts_stream_splitk_kernel.py`)."""
    i = j // 2
    return (j % 2) * 64 + 16 * ((i // 4) % 4) + 8 * ((i // 2) % 2) + 2 * (i // 16) + i % 2


@triton.jit(do_not_specialize=["num_cnt"])  # run-time sizes: one compile for every value
def _moe_stream_prep_kernel(
    x_ptr, xp_ptr, cnt_ptr, num_cnt, stride_x, stride_xp,
    QUANT: tl.constexpr, ZERO_PER: tl.constexpr, PDL: tl.constexpr = False, MMA_ORDER: tl.constexpr = False,
):
    """Program (token t, 128-block kb): xp[t, block kb] = x (QUANT: `fake_quant_fp8`'s values, the
    same ops as `_act_quant_fp8_kernel` with one row) in even-then-odd order (MMA_ORDER: `_mma_pos`'s),
    in xp's dtype; and zeroes its ZERO_PER of the num_cnt arrival counters. PDL: wait for the previous
    kernel (it may write x; and only once it is done may gate/up, which reads the expert ids before its
    own wait, start), then let gate/up launch."""
    if PDL:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
    t = tl.program_id(0)
    kb = tl.program_id(1)
    j = tl.arange(0, 128)
    x = tl.load(x_ptr + t.to(tl.int64) * stride_x + (kb * 128 + j)[None, :]).to(tl.float32)  # [1, 128]
    if QUANT:
        amax = tl.max(tl.abs(x), axis=1)
        has_nan = tl.max((x != x).to(tl.int32), axis=1) > 0  # the reference's NaN amax → the largest scale
        e = tl.where(has_nan, 127, pow2_scale_exponent(amax))
        q = round_e4m3(clamp_e4m3(x * exp2_bits(-e)[:, None]))
        x = q * exp2_bits(e)[:, None]
    if MMA_ORDER:
        pos = _mma_pos(j)
    else:
        pos = _even_odd(j)
    tl.store(xp_ptr + t.to(tl.int64) * stride_xp + (kb * 128 + pos)[None, :], x.to(xp_ptr.dtype.element_ty))
    z = (t * tl.num_programs(1) + kb) * ZERO_PER + tl.arange(0, ZERO_PER)
    tl.store(cnt_ptr + z, 0, mask=z < num_cnt)


@triton.jit
def _lead_rank(ids_ptr, num_pairs, NP: tl.constexpr):
    """(expert, rank, same, q) of program_id(1)'s pair p: its expert id, its rank among that expert's
    pairs in ascending pair order, and which of the NP lanes q (pair ids) route to the same expert."""
    p = tl.program_id(1)
    q = tl.arange(0, NP)
    ids = tl.load(ids_ptr + q, mask=q < num_pairs, other=-1)  # padding lanes: no expert
    expert = tl.load(ids_ptr + p)
    same = ids == expert
    rank = tl.sum((same & (q < p)).to(tl.int32), axis=0)
    return expert, rank, same, q


@triton.jit
def _block_pairs(rank, same, q, num_pairs, BLOCK_M: tl.constexpr):
    """(pair ids [BLOCK_M], valid [BLOCK_M]): the expert's pairs of ranks rank .. rank + BLOCK_M - 1;
    lanes past the expert's last pair are invalid and hold num_pairs."""
    rank_q = tl.cumsum(same.to(tl.int32), axis=0) - 1
    r = tl.arange(0, BLOCK_M)
    hit = same[None, :] & (rank_q[None, :] == (rank + r)[:, None])  # [BLOCK_M, NP]: at most one per row
    valid = tl.max(hit.to(tl.int32), axis=1) > 0
    pair = tl.where(valid, tl.sum(tl.where(hit, q[None, :], 0), axis=1), num_pairs)
    return pair, valid


@triton.jit
def _early_start(w_ptr, row0, stride_wn, BLOCK_N: tl.constexpr, PDL_BLOCKS: tl.constexpr):
    """PDL (programmatic dependent launch): `prefetch.global.L2` of the program's first PDL_BLOCKS
    128-K blocks of codes (64 bytes a row and block, 128-byte lines), then wait for the previous
    kernel to finish with its writes visible (`griddepcontrol.wait`). Before the wait a program reads
    only the expert ids, which the router wrote before the (ordinarily launched) prep kernel started,
    and prefetches weights into L2 (no register, no L1 line, nothing written): the arithmetic and so
    the bits are those of the ordinary launch (`linear_fp8_block`'s "Early start" is the same idea)."""
    lines: tl.constexpr = (PDL_BLOCKS + 1) // 2
    i = tl.arange(0, BLOCK_N * lines)
    ptrs = w_ptr + (row0 + i % BLOCK_N) * stride_wn + (i // BLOCK_N) * 128
    tl.inline_asm_elementwise("prefetch.global.L2 [$1]; // dummy $0", "=r,l", [ptrs], dtype=tl.int32, is_pure=False,
                              pack=1)
    tl.extra.cuda.gdc_wait()


@triton.jit
def _stream_matmul(
    x_ptr, rows, valid, stride_x, w_ptr, ws_ptr, stride_wn, stride_wsn, offs_n, K,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DOT: tl.constexpr, X_PIECES: tl.constexpr,
    USE_ASM: tl.constexpr,
):
    """fp32 [BLOCK_N, BLOCK_M] = W[offs_n, :K] · X[rows, :K]ᵀ for one MXFP4 expert matrix (K % 128 == 0,
    every offs_n in range). x is stored even-then-odd per 128-block; ws_ptr is the scales as int32
    (one word = the 4 group bytes of a row's 128-K block, byte g = group g). The sum runs as the
    split kernel's `_mxfp4_matmul`: per block in order, acc += lo · x_even, then acc += hi · x_odd."""
    acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    half = tl.arange(0, 64)
    shifts = tl.arange(0, 4) * 8
    w_rows = w_ptr + offs_n[:, None] * stride_wn
    s_rows = ws_ptr + offs_n * stride_wsn
    x_rows = x_ptr + rows[:, None] * stride_x
    x_mask = valid[:, None]
    for k0 in range(0, K, 128):
        wb = tl.load(w_rows + (k0 // 2 + half)[None, :])
        sw = tl.load(s_rows + k0 // 128)
        sb = (sw[:, None] >> shifts[None, :]) & 255  # [BLOCK_N, 4] scale bytes (the shift's sign bits masked)
        lo, hi = _mxfp4_quads_bf16(wb, sb, BLOCK_N, USE_ASM)
        x_even = tl.load(x_rows + (k0 + half)[None, :], mask=x_mask, other=0)
        x_odd = tl.load(x_rows + (k0 + 64 + half)[None, :], mask=x_mask, other=0)
        acc = _dot_part(lo, x_even, acc, DOT, X_PIECES)
        acc = _dot_part(hi, x_odd, acc, DOT, X_PIECES)
    return acc


@triton.jit(do_not_specialize=["num_pairs"])  # run-time sizes: one compile for every value
def _moe_stream_gate_up_kernel(
    xp_ptr, w1_ptr, w1s_ptr, w3_ptr, w3s_ptr, ids_ptr, route_w_ptr,
    gu_ptr, h_ptr, cnt_ptr,
    I, D, num_pairs, top_k, limit,
    stride_x, stride_we, stride_wn, stride_wse, stride_wsn, stride_gu, stride_h,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, NP: tl.constexpr, DOT: tl.constexpr,
    X_PIECES: tl.constexpr, USE_ASM: tl.constexpr, H_BF16: tl.constexpr, QUANT_H: tl.constexpr,
    PDL: tl.constexpr, PDL_BLOCKS: tl.constexpr,
):
    """Program (n-tile, pair p, gate|up): gu[pair, which, n] = x[token] · W_e[n] for the rows led by p;
    the last of a 128-channel block's 4 programs stores h[pair, block] (even-then-odd order)."""
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()
    expert, rank, same, q = _lead_rank(ids_ptr, num_pairs, NP)
    if rank % BLOCK_M != 0:
        return
    pair, valid = _block_pairs(rank, same, q, num_pairs, BLOCK_M)
    which = tl.program_id(2)
    pid_n = tl.program_id(0)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    token = pair // top_k
    e64 = expert.to(tl.int64)
    w_ptr = tl.where(which == 0, w1_ptr, w3_ptr) + e64 * stride_we  # one loop (one set of smem buffers)
    ws_ptr = tl.where(which == 0, w1s_ptr, w3s_ptr) + e64 * stride_wse
    if PDL:
        _early_start(w_ptr, pid_n * BLOCK_N, stride_wn, BLOCK_N, PDL_BLOCKS)
    acc = _stream_matmul(xp_ptr, token, valid, stride_x, w_ptr, ws_ptr, stride_wn, stride_wsn, offs_n, D,
                         BLOCK_M, BLOCK_N, DOT, X_PIECES, USE_ASM)
    gu_rows = gu_ptr + pair[None, :].to(tl.int64) * stride_gu
    tl.store(gu_rows + which * I + offs_n[:, None], acc, mask=valid[None, :])

    # The SwiGLU of this 128-channel block, in its last program to arrive ("Fused sum" in
    # linear_fp8_block's kernel docstring: barrier, acq_rel counter, .cg reads).
    tl.debug_barrier()  # bar.sync: every thread's gu stores precede the release below
    blk = pid_n // (128 // BLOCK_N)
    arrived = tl.atomic_add(cnt_ptr + tl.program_id(1) * (I // 128) + blk, 1, sem="acq_rel", scope="gpu")
    if arrived == 2 * (128 // BLOCK_N) - 1:
        offs_h = blk * 128 + tl.arange(0, 128)
        keep = (offs_h < I)[:, None] & valid[None, :]
        g = tl.load(gu_rows + offs_h[:, None], mask=keep, other=0.0, cache_modifier=".cg")
        u = tl.load(gu_rows + I + offs_h[:, None], mask=keep, other=0.0, cache_modifier=".cg")
        h, _, _ = _swiglu_values(g, u, pair, valid, keep, route_w_ptr, limit, H_BF16, QUANT_H)
        dst = h_ptr + pair[None, :].to(tl.int64) * stride_h + (blk * 128 + _even_odd(tl.arange(0, 128)))[:, None]
        if H_BF16:
            tl.store(dst, h.to(tl.bfloat16), mask=keep)
        else:
            tl.store(dst, h, mask=keep)


@triton.jit(do_not_specialize=["num_pairs"])  # run-time sizes: one compile for every value
def _moe_stream_down_kernel(
    h_ptr, w2_ptr, w2s_ptr, ids_ptr,
    y_ptr, out_ptr, cnt_ptr,
    I, D, num_pairs,
    stride_h, stride_we, stride_wn, stride_wse, stride_wsn, stride_y, stride_o,
    TOP_K: tl.constexpr, KPAD: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, NP: tl.constexpr,
    DOT: tl.constexpr, X_PIECES: tl.constexpr, USE_ASM: tl.constexpr, PDL: tl.constexpr,
    PDL_BLOCKS: tl.constexpr,
):
    """Program (n-tile, pair p): y[pair, n] = h[pair, :] · W2_e[n, :]ᵀ for the rows led by p; the last
    program of a (token, n-tile) to arrive writes out[token, n-tile] = Σ of the token's k rows."""
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()
    expert, rank, same, q = _lead_rank(ids_ptr, num_pairs, NP)
    if rank % BLOCK_M != 0:
        return
    pair, valid = _block_pairs(rank, same, q, num_pairs, BLOCK_M)
    pid_n = tl.program_id(0)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    e64 = expert.to(tl.int64)
    if PDL:
        _early_start(w2_ptr + e64 * stride_we, pid_n * BLOCK_N, stride_wn, BLOCK_N, PDL_BLOCKS)
    y = _stream_matmul(h_ptr, pair, valid, stride_h, w2_ptr + e64 * stride_we, w2s_ptr + e64 * stride_wse,
                       stride_wn, stride_wsn, offs_n, I, BLOCK_M, BLOCK_N, DOT, X_PIECES, USE_ASM)
    tl.store(y_ptr + pair[None, :].to(tl.int64) * stride_y + offs_n[:, None], y, mask=valid[None, :])

    # The combine of each token whose k-th row of this tile this is (the same barrier + counters).
    tl.debug_barrier()  # bar.sync: every thread's y stores precede the releases below
    token = pair // TOP_K
    arrived = tl.atomic_add(cnt_ptr + token * tl.num_programs(0) + pid_n, 1, mask=valid, sem="acq_rel", scope="gpu")
    last = valid & (arrived == TOP_K - 1)
    if tl.max(last.to(tl.int32), axis=0) > 0:
        # `_moe_combine_kernel`'s sum: ((0 + y[e_a]) + y[e_b]) + ... in ascending expert id (ties by slot)
        slots = tl.arange(0, KPAD)
        in_k = (slots < TOP_K)[None, :]
        ids = tl.load(ids_ptr + token[:, None].to(tl.int64) * TOP_K + slots[None, :], mask=last[:, None] & in_k,
                      other=0)
        key = tl.where(in_k, ids * KPAD + slots[None, :], _NO_EXPERT)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for _ in tl.static_range(TOP_K):
            j = tl.argmin(key, axis=1)
            src = y_ptr + (token.to(tl.int64) * TOP_K + j)[:, None] * stride_y + offs_n[None, :]
            acc += tl.load(src, mask=last[:, None], other=0.0, cache_modifier=".cg")
            key = tl.where(slots[None, :] == j[:, None], _NO_EXPERT, key)
        tl.store(out_ptr + token[:, None].to(tl.int64) * stride_o + offs_n[None, :], acc, mask=last[:, None])
