"""Private Triton code of the block-scaled linear family; launched only through `triton.py`.

`_blockdot_kernel` serves decode (a weight-streaming GEMV-shaped launch: 16-token tile, fixed
split-K grid) and prefill (a tiled GEMM launch) with ONE arithmetic, so a row's bits never depend
on M. It computes the transposed tile acc[BLOCK_N, BLOCK_M] = W[n-tile, :] · X[m-tile, :]ᵀ
("swap AB"): the weight slab is the MMA's large left operand and the few tokens its small right
operand, so at decode each program streams its BLOCK_N x (KB_PER_GROUP·128) weight slab once.

Numerics (why the order is fixed):
- per 128-wide K block, one dot into a fresh fp32 accumulator; the products are exact (FP8 codes
  and the prepared activations fit the MMA's operand type exactly), so only the MMA's fp32
  summation rounds, and it is the same instruction sequence for every tile shape;
- the block's partial sum is multiplied by the activation scale 2^-k (per row and block) and
  then by the weight block scale 2^(b-127): power-of-two multiplies, exact, once per 128x128
  weights (folded into the partial sum before any cross-block addition);
- K blocks form fixed groups of KB_PER_GROUP (a function of N and K only); blocks add in order
  into the group's accumulator, groups add in order ((0 + g0) + g1) + ..., either in-program or
  by `_sum_groups_kernel` over a workspace (split-K grid), or by the tile's last program (fused
  sum, below). Same additions, same bits, no M.

Fused sum (FUSED_SUM: single-launch ordered split-K, the decode default). Each of a tile's S
programs stores its group partial to the workspace slot of its split, then thread 0 increments
the tile's counter with an acq_rel atomic at GPU scope; the program that reads S-1 (the last to
arrive) reads all S slots back and adds them in split order 0, 1, .., S-1 — the additions of
`_sum_groups_kernel`, so the bits are those of the two-launch path whatever the arrival order —
writes the output tile and stores 0 to the counter. Why every partial is visible to it:
- a `bar.sync` (tl.debug_barrier) after the partial stores orders every thread's stores before
  thread 0's atomic (CTA scope); the atomic's release half is cumulative, so it publishes them all;
- the counter's increments form one modification order, each RMW reading the previous one, so
  each program's release heads a release sequence that reaches the last program's RMW, whose
  acquire half then synchronizes with all S-1 releases (the pattern of the CUDA sample
  threadFenceReduction — partial store, fence, one-thread atomicInc, the last block sums — with
  the fence folded into the atomic; on sm_90 it compiles to MEMBAR.ALL.GPU, ATOMG.ADD.STRONG.GPU,
  CCTL.IVALL in thread 0);
- Triton broadcasts the scalar result of the one-thread atomic to the other threads through
  shared memory and a barrier, which orders their partial loads after the acquire; the loads go
  to L2 (`.cg`), so no L1 line from before the acquire can answer them.
No program waits for another (the last arrival does the work), so there is no co-residency or
forward-progress assumption. Reset: exactly S increments reach a tile and the last one is the
resetter's, so nothing touches the counter after its store in this launch; the next launch on the
stream (and every CUDA-graph replay) starts after this one has finished, so it finds 0. The
counters are shared per device: two fused launches must not run concurrently on two streams.

Early start (PDL, decode; the launcher's shape rule uses it for small weight-only layers): as a
programmatic dependent launch, a program first signals that the next kernel may launch
(`griddepcontrol.launch_dependents`: it takes effect once every program of this grid has started),
then issues `prefetch.global.L2` for the 128-byte row segments of its first PDL_BLOCKS weight
blocks, then waits for the previous kernel on the stream to finish and its writes to be visible
(`griddepcontrol.wait`) before it loads x, reads the scales, stores anything or touches a counter.
So the weight stream of this launch starts during the tail of the previous one (the fixed per-call
cost of the 32 MB layers), and nothing it reads or writes depends on the overlap: the prefetch fills
L2 only (no register, no L1 line), and L2 is where every SM's stores land, so even weights written
by the previous kernel are read correctly after the wait. The arithmetic is unchanged, so the bits
are those of the ordinary launch.

Activation preparation (X_MODE):
- 0: float x (fp32/bf16/fp16) for a weight-only FP8 layer. Each (row, 128-block) of x is scaled
  by 2^k so that its largest magnitude lies in [2^14, 2^15), then rounded to fp16: exact for
  bf16 x (8 significant bits fit fp16's 11 wherever the element is within 2^-28 of the block's
  largest), and FP8 codes widen to fp16 with one conversion per pair (to bf16 it takes three
  more instructions, which is what kept the previous version issue-bound at decode).
  X_PIECES == 2 adds a second fp16 dot on the residual x·2^k − hi (fp32 x keeps ~22 bits).
- 1: e4m3fn codes with fp32 scales [M, ceil(K/128)] (W8A8): FP8 tensor cores (DOT == 2) or
  both sides widened to fp16 (exact) where the device has none.
- 2: float x against bf16 weights (linear_bf16): bf16 hi (+ lo for fp32 x) pieces, no scales.
- 3: X_MODE 0's fp16 values and 2^-k scales for bf16/fp16 x, computed beforehand by
  `_prep_x_kernel` (an experiment of issue 9, off the default path: does the weight-only decode
  lose to W8A8 through the per-block activation preparation — amax reduction by shuffles, fp16
  tile stored to shared memory, two more barriers per block — rather than the weight widening?).
  Same operands into the same MMA as X_MODE 0, so the same bits.
- 4: float x (fp32/bf16/fp16) quantized in the program to e4m3fn codes and power-of-two scales
  (W8A8 with the activation quantization fused: no separate `act_quant` launch, decode). Each
  program quantizes its own (row, 128-block) slices of x with `quantize_rows_e4m3`, the very JIT
  helper of the standalone `_act_quant_fp8_kernel`: quantization is a pure function of one
  (row, 128-block), so the codes are those the standalone launch stores, the scale 2^e the one it
  stores, and from there the operands and arithmetic are X_MODE 1's: the same bits. The price is
  redundant work (every output tile re-quantizes x's 16 x 128 tile per block: an amax reduction
  and ~10 ALU ops per element, small beside a 64 x 128 weight tile, but on the K loop's path).
  Few rows (XQ_ROWS > 0, set by the launcher when M <= XQ_ROWS < BLOCK_M, i.e. one row tile):
  only rows 0 .. XQ_ROWS-1 are loaded and quantized, then broadcast into the MMA's 16-row tile
  with the rest zeroed — the zero rows the full tile would have quantized to code 0. Same codes
  for every live row, same MMA operands, same bits; at M = 1 the quantization's K-loop
  instructions drop ~16-fold (sm90_compile.py).

Output dtype: the final store (the in-program sum, the fused sum's last program, or
`_sum_groups_kernel`) rounds the fp32 result to the output tensor's dtype (`_to_out`); split
partials stay fp32. bf16 is rounded with torch's own integer recipe (c10 `round_to_nearest_even`:
bits + 0x7FFF + lsb, NaN → 0x7FC0) rather than Triton's cast, whose interpreter twin rounds ties
away and can lose the carry into the exponent (triton 3.9) — so the CPU tests check the very
arithmetic the GPU runs; fp16 uses the cast (cvt.rn on the GPU, numpy's RNE in the interpreter).
So an `out_dtype=torch.bfloat16` launch equals the fp32 launch followed by `.to(torch.bfloat16)`.
"""

from __future__ import annotations

import triton
import triton.language as tl

from mxserve.kernels.act_quant._act_quant_kernel import exp2_bits, quantize_rows_e4m3


@triton.jit
def _pow2(e):
    """2^e as fp32 for integer e in [-126, 127], built from its bit pattern (exact)."""
    return ((e + 127) << 23).to(tl.float32, bitcast=True)


@triton.jit
def _to_out(v, out_ptr):
    """fp32 v rounded to out_ptr's element type, bit for bit torch's `.to()` (module docstring)."""
    if out_ptr.dtype.element_ty == tl.bfloat16:
        bits = v.to(tl.uint32, bitcast=True)
        r = (bits + (0x7FFF + ((bits >> 16) & 1))) >> 16
        r = tl.where(v != v, 0x7FC0, r)
        return r.to(tl.uint16).to(tl.bfloat16, bitcast=True)
    else:
        return v.to(out_ptr.dtype.element_ty)  # fp32: unchanged; fp16: round to nearest even


@triton.jit
def _ue8m0_to_fp32(b):
    """2^(b-127) built from its bit pattern: exact for every byte (0 → the fp32 subnormal 2^-127,
    255 → NaN), with no exp2 approximation."""
    b = b.to(tl.int32)
    bits = tl.where(b == 0, 0x00400000, tl.where(b == 255, 0x7FC00000, b << 23))
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _scale_to_fp16(xf):
    """[rows, 128] fp32 → (hi, lo, inv): each row scaled by 2^k so that its largest magnitude lies
    in [2^14, 2^15), hi = fp16(x·2^k), lo = fp16(x·2^k − hi), inv = 2^-k [rows] (X_MODE 0 and 3)."""
    amax = tl.max(tl.abs(xf), axis=1)  # [rows]
    e = ((amax.to(tl.int32, bitcast=True) >> 23) & 0xFF) - 127  # floor(log2 amax) for normal amax
    k_exp = tl.minimum(tl.maximum(14 - e, -126), 126)
    xsc = xf * _pow2(k_exp)[:, None]
    hi = xsc.to(tl.float16)
    lo = (xsc - hi.to(tl.float32)).to(tl.float16)
    return hi, lo, _pow2(-k_exp)


@triton.jit
def _block_partial(
    x_ptr, xs_ptr, w_ptr, lut_ptr, offs_m, m_mask, w_rows, n_mask, kb, M, K, stride_xm, stride_xsm, stride_wn,
    BLOCK_M: tl.constexpr, X_MODE: tl.constexpr, X_PIECES: tl.constexpr, DOT: tl.constexpr, W_KIND: tl.constexpr,
    EVEN: tl.constexpr, XQ_ROWS: tl.constexpr,
):
    """One 128-K block: the [BLOCK_N, BLOCK_M] partial sum, times the activation scale (not yet
    the weight block scale). EVEN: every block of the grid is in range (the launcher checks N, K
    and the grouping), so the weight tile loads unmasked and x keeps only its row mask: the same
    values, ~25 fewer instructions per block (per-row predicates of the 8-byte cp.asyncs).
    XQ_ROWS (X_MODE 4, > 0): M <= XQ_ROWS < BLOCK_M, so only rows 0 .. XQ_ROWS-1 are loaded and
    quantized (the kernel docstring, "few rows")."""
    offs_k = kb * 128 + tl.arange(0, 128)
    if X_MODE == 4 and XQ_ROWS > 0:
        x_rows = tl.arange(0, XQ_ROWS)  # one row tile (pid_m = 0): M <= XQ_ROWS
        x_mask = (x_rows < M)[:, None]
    else:
        x_rows = offs_m
        x_mask = m_mask[:, None]
    if EVEN:
        w = tl.load(w_ptr + w_rows[:, None] * stride_wn + offs_k[None, :])
        x = tl.load(x_ptr + x_rows[:, None] * stride_xm + offs_k[None, :], mask=x_mask, other=0)
    else:
        k_mask = offs_k < K
        w = tl.load(w_ptr + w_rows[:, None] * stride_wn + offs_k[None, :], mask=n_mask[:, None] & k_mask[None, :],
                    other=0)
        x = tl.load(x_ptr + x_rows[:, None] * stride_xm + offs_k[None, :], mask=x_mask & k_mask[None, :], other=0)
    # --- weight operand --------------------------------------------------------------------------
    if W_KIND == 0:
        w_val = w.to(tl.float8e4nv, bitcast=True)  # e4m3fn codes
    elif W_KIND == 1:
        w_val = tl.load(lut_ptr + w.to(tl.int32))  # any 8-bit format through its fp32 value table
    else:
        w_val = w  # bf16 values
    # --- activation operand(s) -------------------------------------------------------------------
    if X_MODE == 0:
        hi, lo, inv = _scale_to_fp16(x.to(tl.float32))
    elif X_MODE == 1:
        inv = tl.load(xs_ptr + offs_m * stride_xsm + kb, mask=m_mask, other=0.0)
        hi = x.to(tl.float8e4nv, bitcast=True)
        lo = hi
    elif X_MODE == 4:
        # W8A8 with the activation quantization fused (module docstring): masked-out rows and
        # channels load as 0, as in the standalone launch, so amax and the codes are its own
        q, e = quantize_rows_e4m3(x.to(tl.float32))
        inv = exp2_bits(e)
        if XQ_ROWS > 0:
            # [XQ_ROWS, 128] → the MMA's [BLOCK_M, 128] tile: row r holds row r % XQ_ROWS, then the
            # rows >= XQ_ROWS (never live) are zeroed; their scales do not matter (codes 0, masked out)
            q = tl.reshape(tl.broadcast_to(q[None, :, :], (BLOCK_M // XQ_ROWS, XQ_ROWS, 128)), (BLOCK_M, 128))
            q = tl.where((tl.arange(0, BLOCK_M) < XQ_ROWS)[:, None], q, 0.0)
            inv = tl.reshape(tl.broadcast_to(inv[None, :], (BLOCK_M // XQ_ROWS, XQ_ROWS)), (BLOCK_M,))
        hi = q.to(tl.float8e4nv)  # exact: q is an e4m3fn value (the standalone launch's code)
        lo = hi
    elif X_MODE == 3:
        # prepared by `_prep_x_kernel` (the X_MODE 0 values: same helper, same bits); the tile goes
        # from cp.async straight to the MMA, as W8A8's codes do, without the per-block reduction
        inv = tl.load(xs_ptr + offs_m * stride_xsm + kb, mask=m_mask, other=0.0)
        hi = x
        lo = x
    else:
        xf = x.to(tl.float32)
        hi = xf.to(tl.bfloat16)
        lo = (xf - hi.to(tl.float32)).to(tl.bfloat16)
    # --- the block's dot -------------------------------------------------------------------------
    if DOT == 0:
        # interpreter: an explicit fp32 product-and-sum over the 128 channels, whose order depends
        # only on K (numpy's matmul blocking would change with the tile shape; its fp16/bf16 dot is wrong)
        wf = w_val.to(tl.float32)
        blk = tl.sum(wf[:, None, :] * hi.to(tl.float32)[None, :, :], axis=2)
        if X_PIECES == 2:
            blk += tl.sum(wf[:, None, :] * lo.to(tl.float32)[None, :, :], axis=2)
    elif DOT == 2:
        blk = tl.dot(w_val, tl.trans(hi))  # e4m3 x e4m3 on FP8 tensor cores
    else:
        if W_KIND == 2:
            wo = w_val
        else:
            wo = w_val.to(tl.float16)  # e4m3 → fp16 is exact (and one cvt per pair)
        if X_MODE == 1 or X_MODE == 4:
            hi = hi.to(tl.float16)
        blk = tl.dot(wo, tl.trans(hi))
        if X_PIECES == 2:
            blk = tl.dot(wo, tl.trans(lo), blk)
    if X_MODE != 2:
        blk = blk * inv[None, :]
    return blk


@triton.jit
def _group_partial(
    x_ptr, xs_ptr, w_ptr, ws_ptr, lut_ptr, offs_m, m_mask, w_rows, n_mask, scale_row, kb0, num_kb, M, K,
    stride_xm, stride_xsm, stride_wn,
    KB_PER_GROUP, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    X_MODE: tl.constexpr, X_PIECES: tl.constexpr, DOT: tl.constexpr, W_KIND: tl.constexpr, EVEN: tl.constexpr,
    XQ_ROWS: tl.constexpr,
):
    """Sum over the group's K blocks kb0 .. kb0+KB_PER_GROUP-1 (those < num_kb), each block's
    partial already scaled; blocks past the end contribute exact zeros (none exist when EVEN)."""
    acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    if W_KIND != 2:
        s_next = tl.load(scale_row + kb0, mask=kb0 < num_kb, other=127)  # weight-only (X_MODE != 1)
    for j in range(KB_PER_GROUP):
        kb = kb0 + j
        blk = _block_partial(x_ptr, xs_ptr, w_ptr, lut_ptr, offs_m, m_mask, w_rows, n_mask, kb, M, K,
                             stride_xm, stride_xsm, stride_wn, BLOCK_M, X_MODE, X_PIECES, DOT, W_KIND, EVEN, XQ_ROWS)
        if W_KIND != 2:
            # the weight block scale, once per 128x128 weights. The pipeliner leaves this one-byte
            # load in place: loaded in the block that uses it, its L2 round trip sat between the
            # block's MMA and the scale multiply (sm_90 SASS: LDG.E.U8 issued after the MMA wait,
            # consumed ~70 instructions later). Weight-only loads it one block ahead by hand
            # (the same value, so the same bits); W8A8 keeps the in-place load: with the prefetch
            # it took 84 registers instead of 72, 5 programs per SM instead of 6 (Triton 3.9, sm_90)
            if X_MODE == 1 or X_MODE == 4:
                s = tl.load(scale_row + kb, mask=kb < num_kb, other=127)
            else:
                s = s_next
                s_next = tl.load(scale_row + kb + 1, mask=kb + 1 < num_kb, other=127)
            blk = blk * _ue8m0_to_fp32(s)
        acc += blk
    return acc


@triton.jit(do_not_specialize=['M', 'stride_os', 'NUM_SPLITS', 'M_BUCKET', 'KB_PER_GROUP', 'NUM_GROUPS',
                            'SPLIT_ROTATE'])  # run-time sizes: one compile for every value
def _blockdot_kernel(
    x_ptr, xs_ptr, w_ptr, ws_ptr, lut_ptr, out_ptr,
    M, N, K,
    stride_xm, stride_xg, stride_xsm, stride_xsg, stride_wn, stride_wsn, stride_os, stride_om,
    NUM_SPLITS,
    M_BUCKET,  # unused by the code: the prefill autotuner's key (power-of-two bucket of M)
    KB_PER_GROUP,  # 128-K blocks per summation group (from N, K only; runtime: no recompile per shape)
    NUM_GROUPS,  # ceil(ceil(K/128) / KB_PER_GROUP)
    SPLIT: tl.constexpr,  # True: one group per program (split-K grid), partials to out[split] (the
                          # output itself when S == 1: decode runs this code for one-group layers too)
    BLOCK_M: tl.constexpr,  # tokens per tile (16 at decode)
    BLOCK_N: tl.constexpr,  # output features per tile; divides 128 (one scale row per tile)
    X_MODE: tl.constexpr, X_PIECES: tl.constexpr, DOT: tl.constexpr, W_KIND: tl.constexpr,
    sum_ptr=None,  # FUSED_SUM: the output [M, G·N] (out_ptr is then the partials' workspace)
    cnt_ptr=None,  # FUSED_SUM: int32 arrival counters, one per output tile, 0 on entry and on exit
    SPLIT_ROTATE=0,  # tests only: split = (pid_z + r) % S, so another split arrives last
    FUSED_SUM: tl.constexpr = False,  # SPLIT: the tile's last program sums the partials (one launch)
    EVEN: tl.constexpr = False,  # no partial tiles or blocks: N % 128 == 0, K % 128 == 0, groups divide K
    PDL: tl.constexpr = False,  # launched as a programmatic dependent launch (see "Early start" above)
    PDL_BLOCKS: tl.constexpr = 4,  # PDL: 128-K weight blocks per program prefetched to L2 before the wait
    XQ_ROWS: tl.constexpr = 0,  # X_MODE 4 with M <= XQ_ROWS < BLOCK_M: quantize only those rows (0: the tile)
):
    """Grid (cdiv(N, BLOCK_N), cdiv(M, BLOCK_M), G·S): N is the per-group output width; group g of
    a block-diagonal weight reads x[:, g, :] (stride_xg) and weight rows g·N .. g·N+N-1 and writes
    output columns g·N ..; S = NUM_SPLITS split-K programs (1 without SPLIT). The arguments after
    W_KIND have defaults so that `linear_bf16` launches it unchanged."""
    pid_n = tl.program_id(0)
    pid_m = tl.program_id(1)
    pid_z = tl.program_id(2)
    grp = pid_z // NUM_SPLITS
    split = (pid_z + SPLIT_ROTATE) % NUM_SPLITS
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    n_mask = offs_n < N
    m_mask = offs_m < M
    w_rows = grp * N + offs_n
    scale_row = ws_ptr + ((grp * N + pid_n * BLOCK_N) // 128) * stride_wsn
    x_base = x_ptr + grp * stride_xg
    xs_base = xs_ptr + grp * stride_xsg
    num_kb = tl.cdiv(K, 128)
    if PDL:
        # Early start (module docstring): no load of x, no store, no counter before the wait
        tl.extra.cuda.gdc_launch_dependents()
        kb_first = split * KB_PER_GROUP if SPLIT else 0
        _prefetch_weight_l2(w_ptr, grp * N + pid_n * BLOCK_N, grp * N + N, stride_wn, kb_first,
                            tl.minimum(kb_first + KB_PER_GROUP, num_kb), BLOCK_N, PDL_BLOCKS)
        tl.extra.cuda.gdc_wait()
    if SPLIT:
        total = _group_partial(x_base, xs_base, w_ptr, ws_ptr, lut_ptr, offs_m, m_mask, w_rows, n_mask, scale_row,
                               split * KB_PER_GROUP, num_kb, M, K, stride_xm, stride_xsm, stride_wn,
                               KB_PER_GROUP, BLOCK_M, BLOCK_N, X_MODE, X_PIECES, DOT, W_KIND, EVEN, XQ_ROWS)
    else:
        total = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
        for g in range(NUM_GROUPS):
            total += _group_partial(x_base, xs_base, w_ptr, ws_ptr, lut_ptr, offs_m, m_mask, w_rows, n_mask,
                                    scale_row, g * KB_PER_GROUP, num_kb, M, K, stride_xm, stride_xsm, stride_wn,
                                    KB_PER_GROUP, BLOCK_M, BLOCK_N, X_MODE, X_PIECES, DOT, W_KIND, EVEN, XQ_ROWS)
    # out is [S or 1, M, G·N]; the tile is transposed on the way out
    o_mask = n_mask[:, None] & m_mask[None, :]
    tile_offs = offs_m[None, :] * stride_om + (grp * N + offs_n)[:, None]
    # the partials' workspace is fp32; without a split this is the output (out_dtype: rounded here)
    tl.store(out_ptr + split * stride_os + tile_offs, _to_out(total, out_ptr), mask=o_mask)
    if FUSED_SUM:
        # Single-launch ordered split-K (why it is correct: the module docstring, "Fused sum").
        tl.debug_barrier()  # bar.sync: every thread's partial stores precede the release below
        tile = (grp * tl.num_programs(1) + pid_m) * tl.num_programs(0) + pid_n
        arrived = tl.atomic_add(cnt_ptr + tile, 1, sem="acq_rel", scope="gpu")
        if arrived == NUM_SPLITS - 1:  # the tile's last program: all S partials are visible
            acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
            part = out_ptr + tile_offs
            for s0 in range(0, NUM_SPLITS, 8):  # 8 loads in flight per L2 round trip, added in order
                p0 = _load_partial(part, s0, NUM_SPLITS, stride_os, o_mask)
                p1 = _load_partial(part, s0 + 1, NUM_SPLITS, stride_os, o_mask)
                p2 = _load_partial(part, s0 + 2, NUM_SPLITS, stride_os, o_mask)
                p3 = _load_partial(part, s0 + 3, NUM_SPLITS, stride_os, o_mask)
                p4 = _load_partial(part, s0 + 4, NUM_SPLITS, stride_os, o_mask)
                p5 = _load_partial(part, s0 + 5, NUM_SPLITS, stride_os, o_mask)
                p6 = _load_partial(part, s0 + 6, NUM_SPLITS, stride_os, o_mask)
                p7 = _load_partial(part, s0 + 7, NUM_SPLITS, stride_os, o_mask)
                acc += p0
                acc += p1
                acc += p2
                acc += p3
                acc += p4
                acc += p5
                acc += p6
                acc += p7
            tl.store(sum_ptr + tile_offs, _to_out(acc, sum_ptr), mask=o_mask)  # out_dtype: rounded here
            tl.store(cnt_ptr + tile, 0)  # no other program of this launch touches it again


@triton.jit
def _prefetch_weight_l2(w_ptr, row0, row_end, stride_wn, kb_first, kb_end, BLOCK_N: tl.constexpr,
                        PDL_BLOCKS: tl.constexpr):
    """`prefetch.global.L2` of the 128-byte row segments of weight rows row0 .. row0+BLOCK_N-1 in
    blocks kb_first .. kb_first+PDL_BLOCKS-1, clamped to rows < row_end and blocks < kb_end (a
    duplicate hint is harmless). L2 only: it fills no register and no L1 line, and L2 is where every
    SM's stores become visible, so it is safe even if the kernel before this one wrote the weights."""
    i = tl.arange(0, BLOCK_N * PDL_BLOCKS)
    row = tl.minimum(row0 + i % BLOCK_N, row_end - 1)
    kb = tl.minimum(kb_first + i // BLOCK_N, kb_end - 1)
    ptrs = w_ptr + row.to(tl.int64) * stride_wn + kb * 128
    tl.inline_asm_elementwise("prefetch.global.L2 [$1]; // dummy $0", "=r,l", [ptrs], dtype=tl.int32, is_pure=False,
                              pack=1)


@triton.jit
def _load_partial(part, s, num_splits, stride_os, mask):
    """Split s's partial of a tile; an exact +0.0 past the last split (the running sum starts at
    +0.0, so it is never -0.0, and x + 0.0 == x for every x but -0.0; a NaN is already NaN).
    `.cg` reads at L2, where the other programs' stores were released, never a stale L1 line."""
    in_range = (tl.zeros(mask.shape, tl.int32) + s) < num_splits  # a tensor: the interpreter rejects bool & scalar
    return tl.load(part + s * stride_os, mask=mask & in_range, other=0.0, cache_modifier=".cg")


@triton.jit(do_not_specialize=['numel', 'stride_g'])  # run-time sizes: one compile for every value
def _sum_groups_kernel(part_ptr, out_ptr, numel, stride_g, NUM_GROUPS: tl.constexpr, BLOCK: tl.constexpr):
    """out = ((0 + p_0) + p_1) + ... in group order: the same additions as the in-program path."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < numel
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for g in tl.static_range(NUM_GROUPS):
        acc += tl.load(part_ptr + g * stride_g + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, _to_out(acc, out_ptr), mask=mask)  # out_dtype: rounded here


@triton.jit(do_not_specialize=['M'])  # run-time size: one compile for every value
def _prep_x_kernel(x_ptr, hi_ptr, inv_ptr, M, K, stride_xm, stride_hm, stride_im, BLOCK_M: tl.constexpr):
    """X_MODE 3's operands: hi [M, K] fp16 and inv [M, ceil(K/128)] fp32; grid (cdiv(M, BLOCK_M), ceil(K/128))."""
    kb = tl.program_id(1)
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_k = kb * 128 + tl.arange(0, 128)
    m_mask = offs_m < M
    mask = m_mask[:, None] & (offs_k < K)[None, :]
    x = tl.load(x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :], mask=mask, other=0)
    hi, _lo, inv = _scale_to_fp16(x.to(tl.float32))
    tl.store(hi_ptr + offs_m[:, None] * stride_hm + offs_k[None, :], hi, mask=mask)
    tl.store(inv_ptr + offs_m * stride_im + kb, inv, mask=m_mask)
