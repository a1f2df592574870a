"""Private Triton code of the hyper-connection ops; launched only through `triton.py`.

Four kernels, each mirroring one stretch of the torch twins (`reference.py`) rounding point by
rounding point:

* `_hc_sumsq_kernel` — per token, the fp64 sum of squares of its flattened streams over one
  K-split (`SPLIT_K` elements of hc·D) → partials [T, S] fp64.
* `_hc_mix_kernel` — per (token block, K-split): sums that token's S partials (one [BLOCK_T, S]
  tile, a fixed reduction tree), rho = fp32(1 / sqrt(sum / K + eps)) (the twin's mean divides
  by K on the CPU; CUDA torch multiplies by 1/K, the same bits for the power-of-two K of Flash
  and the default model; its rsqrt is 1/sqrt on the CPU), then the fp32 product x·rho (rounded
  to fp32 BEFORE the matmul, as the twin) times fn in fp64 over the split, the split's steps
  unrolled → partial mixes [T, S, N] fp64. fp32·fp32 products are exact in fp64, so an FMA changes
  nothing here. (The device's Triton 3.6 still issues each step's loads only after the previous
  step's FMAs and all of them after rho: with PREFETCH the split's rows are in L1 by then.)
* `_hc_finish_kernel` — per (token block, D-block): the S mix partials summed (one tile per
  use, a fixed tree) and rounded once to fp32 (the twin's `.float()`), pre = sigmoid(m·s0 + b)
  + eps in fp64, the block input Σ_i pre_i·X_i in fp64 in stream order (i = 0, 1, ...), from +0
  and without FMA (the twin materialises each product), rounded fp64 → fp32 →
  stream dtype (torch's double → bfloat16 cast goes through float too). With `WITH_POST` (off
  for `hc_head`) BLOCK_T // POST_BLOCK_T more programs per token block (the grid's last columns)
  do post = 2·sigmoid(·) and the softmax + Sinkhorn of comb in fp64 beside the block-input
  programs (or, PART 2, in a launch of their own: the side stream), and store both as fp32.
  POST_BLOCK_T = 1. In the register tile ([1, hc, hc], COMB_LANES off: the old kernel) the
  layout is the compiler's: Triton 3.9 gives one element a thread, but the device's 3.6 gives a
  thread a whole column at Flash shapes, 4 fp64 divisions in a row per Sinkhorn half-step.
  `_comb_lanes` (hc <= 4) forces one element a thread and writes the row and column sums out
  in the orders the 3.6 build used there, so the same fp64 operations run in the same order.
* `_hc_post_kernel` — per (token, D-block): X'_j = post_j·F + Σ_i comb_ij·X_i in fp64, the sum
  over i in order from +0, rounded like the block input. With `HAS_ADDEND`, F is first the fp32
  sum of two fp32 block outputs (the MoE's routed and shared experts) rounded to the stream dtype,
  exactly what torch's add and cast before the call gave (one fp32 add, round to nearest even). Every product is exact in fp64 (fp32
  weights times bf16/fp32 values), so only the order of the five additions could differ from
  the twin's BLAS (sequential over the 4-long contraction on the CPU).

Why the results equal the twin's bits "in practice" and not by construction: the fp64 sums
(sum of squares, the mixes' K = hc·D terms, the 4-element softmax/Sinkhorn sums) run in another
order than torch's, and the transcendentals (exp) differ between libdevice, Sleef (CPU torch)
and numpy (the interpreter) by an fp64 ulp or so. Each such value is rounded once to fp32 (or
bf16), and a difference of d fp64 ulps changes that rounding only when the exact value lies
within d·2^-53 (relative) of an fp32 rounding boundary: probability ≈ d·2^-29 per value. The
mixes are the worst case: the two summation orders of K products differ by ~√K·2^-53 relative
to the mix (random-walk rounding), so a mix flips one fp32 ulp with probability ≈ √K·2^-29:
≈ 2^-24 at the default model (K = 1024), ≈ 2^-22 at Flash (K = 16384), i.e. ~2e-7 per mix
(measured in torch: 0 of 98304 Flash-shape fp32 mixes differ between BLAS order and a 64-split
order); then the downstream values differ by that ulp's effect and are otherwise the same math.
The twin's own bits move the same way between CPU and CUDA torch (BLAS orders, Sleef vs
libdevice exp). A
token's result never depends on the other tokens: the split sizes, token blocks and every
reduction order are fixed by constexprs that are functions of (hc, D) only, never of T.

fp64 transcendentals: on the GPU the libdevice `exp` (the function CUDA torch's `std::exp(double)`
compiles to; Triton 3.9 inlines the same for `tl.exp` on fp64, but the device runs 3.6, so it is
called explicitly); the interpreter cannot call libdevice and uses `tl.exp` (numpy). sigmoid is
written as 1 / (1 + exp(-x)), torch's formula on both CPU and CUDA. `sqrt` and `/` on fp64 are
IEEE (sqrt.rn.f64, div.rn.f64). The epsilons are constexprs turned into fp64 with `tl.full`:
a Python float kernel argument is an fp32 parameter on the GPU (1e-6 would lose its low bits)
while the interpreter keeps it fp64, so the two would disagree.
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton.language.extra import libdevice

from mxserve.kernels.attention_ops._cache_jit import round_bf16
from mxserve.kernels.early_start import wait_for_previous
from mxserve.kernels.hyper_connection._prefetch import prefetch_l1


@triton.jit
def _exp_f64(x, USE_LIBDEVICE: tl.constexpr):
    if USE_LIBDEVICE:
        return libdevice.exp(x)
    return tl.exp(x)


@triton.jit
def _sqrt_f64(x, USE_LIBDEVICE: tl.constexpr):
    if USE_LIBDEVICE:
        return libdevice.sqrt_rn(x)
    return tl.sqrt(x)


@triton.jit
def _sigmoid_f64(x, USE_LIBDEVICE: tl.constexpr):
    """torch's sigmoid formula in fp64: 1 / (1 + exp(-x))."""
    return 1.0 / (1.0 + _exp_f64(-x, USE_LIBDEVICE))


@triton.jit
def _store_rounded(ptr, acc, mask, OUT_BF16: tl.constexpr):
    """fp64 → fp32 → the output dtype (torch rounds double → bfloat16 through float as well)."""
    v = acc.to(tl.float32)
    if OUT_BF16:
        v = round_bf16(v)  # exact bf16 value: the cast below is exact (the interpreter's truncates)
    tl.store(ptr, v.to(ptr.dtype.element_ty), mask=mask)


@triton.jit(do_not_specialize=["T"])  # run-time sizes: one compile for every batch
def _hc_sumsq_kernel(
    x_ptr, sumsq_ptr, T, K, stride_xt,
    NUM_SPLITS: tl.constexpr, SPLIT_K: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_K: tl.constexpr,
    PDL: tl.constexpr = False,
):
    # the mix launch may start now (it waits for this grid's end before reading anything of it); and
    # when this launch is early too (MXSERVE_EARLY_START), nothing is read before the previous kernel is done
    wait_for_previous(PDL)
    offs_t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    split = tl.program_id(1)
    t_mask = offs_t < T
    rows = x_ptr + offs_t.to(tl.int64)[:, None] * stride_xt
    acc = tl.zeros((BLOCK_T, BLOCK_K), dtype=tl.float64)
    for k0 in tl.static_range(0, SPLIT_K, BLOCK_K):
        offs_k = split * SPLIT_K + k0 + tl.arange(0, BLOCK_K)
        x = tl.load(rows + offs_k[None, :], mask=t_mask[:, None] & (offs_k < K)[None, :], other=0.0)
        x = x.to(tl.float32).to(tl.float64)
        acc += x * x  # exact squares
    tl.store(sumsq_ptr + offs_t * NUM_SPLITS + split, tl.sum(acc, axis=1), mask=t_mask)


@triton.jit
def _sumsq_partials(x_ptr, offs_t, T, K, stride_xt, NUM_SPLITS: tl.constexpr, SPLITS_PAD: tl.constexpr,
                    SPLIT_K: tl.constexpr, BLOCK_K: tl.constexpr):
    """`_hc_sumsq_kernel`'s partials of every split for the tokens `offs_t`, as one [BLOCK_T,
    SPLITS_PAD] tile (0 past NUM_SPLITS): the same steps and the same per-split reduction, so the
    same fp64 values; the fused mix launch (few splits) uses it instead of reading that launch's
    output. Each split's value is placed exactly (x + 0.0 == x: squares are never -0.0)."""
    t_mask = offs_t < T
    rows = x_ptr + offs_t.to(tl.int64)[:, None] * stride_xt
    splits = tl.arange(0, SPLITS_PAD)[None, :]
    tile = tl.zeros((offs_t.shape[0], SPLITS_PAD), dtype=tl.float64)
    for split in tl.static_range(NUM_SPLITS):
        acc = tl.zeros((offs_t.shape[0], BLOCK_K), dtype=tl.float64)
        for k0 in tl.static_range(0, SPLIT_K, BLOCK_K):
            offs_k = split * SPLIT_K + k0 + tl.arange(0, BLOCK_K)
            x = tl.load(rows + offs_k[None, :], mask=t_mask[:, None] & (offs_k < K)[None, :], other=0.0)
            x = x.to(tl.float32).to(tl.float64)
            acc += x * x  # exact squares
        tile = tl.where(splits == split, tl.sum(acc, axis=1)[:, None], tile)
    return tile


@triton.jit
def _prefetch_rows(ptr, rows, num_rows, stride, k0, K, SPAN: tl.constexpr):
    """Prefetch elements [k0, k0 + SPAN) of `rows` (those < num_rows) into L1: one address per
    128-byte line (alignment aside; a line straddling the span's end is fetched whole)."""
    STEP: tl.constexpr = 128 // (ptr.dtype.element_ty.primitive_bitwidth // 8)
    LINES: tl.constexpr = (SPAN + STEP - 1) // STEP
    k = k0 + tl.arange(0, LINES) * STEP
    ptrs = ptr + rows.to(tl.int64)[:, None] * stride + k[None, :]
    prefetch_l1(ptrs, (rows < num_rows)[:, None] & (k < K)[None, :], True)


@triton.jit(do_not_specialize=["T"])
def _hc_mix_kernel(
    x_ptr, fn_ptr, sumsq_ptr, mix_ptr, T, K, N, stride_xt, stride_fn,
    RMS_EPS: tl.constexpr, NUM_SPLITS: tl.constexpr, SPLITS_PAD: tl.constexpr, SPLIT_K: tl.constexpr,
    BLOCK_T: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, USE_LIBDEVICE: tl.constexpr,
    PREFETCH: tl.constexpr = False, PDL: tl.constexpr = False,
    FUSED_SUMSQ: tl.constexpr = False, SUMSQ_BLOCK_K: tl.constexpr = 128,
):
    if PDL:  # "Early start" in triton.py: the finish launch may start now
        tl.extra.cuda.gdc_launch_dependents()
    offs_t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    split = tl.program_id(1)
    t_mask = offs_t < T
    if FUSED_SUMSQ and PDL:  # the first launch of hc_pre: the caller's kernel wrote x, so read
        tl.extra.cuda.gdc_wait()  # (or prefetch) nothing before it is done
    if PREFETCH:  # this split of fn's rows and of the tokens' rows into L1, before the rho chain
        _prefetch_rows(fn_ptr, tl.arange(0, BLOCK_N), N, stride_fn, split * SPLIT_K, K, SPLIT_K)
        _prefetch_rows(x_ptr, offs_t, T, stride_xt, split * SPLIT_K, K, SPLIT_K)
    # rho of each token: the sum of its sum-of-squares partials (one tile, a fixed reduction
    # tree), mean, + eps, 1/sqrt, → fp32
    splits = tl.arange(0, SPLITS_PAD)
    if FUSED_SUMSQ:  # every split's partial computed here, as `_hc_sumsq_kernel` computes it
        ss = tl.sum(_sumsq_partials(x_ptr, offs_t, T, K, stride_xt, NUM_SPLITS, SPLITS_PAD, SPLIT_K, SUMSQ_BLOCK_K),
                    axis=1)
    else:
        if PDL:  # the sums of squares are the previous launch's: nothing of it is read before this
            tl.extra.cuda.gdc_wait()
        ss = tl.sum(tl.load(sumsq_ptr + offs_t[:, None] * NUM_SPLITS + splits[None, :],
                            mask=t_mask[:, None] & (splits < NUM_SPLITS)[None, :], other=0.0), axis=1)
    rho = (1.0 / _sqrt_f64(ss / K + tl.full([], RMS_EPS, tl.float64), USE_LIBDEVICE)).to(tl.float32)

    # x as [BLOCK_T, 1, BLOCK_K] and fn as [1, BLOCK_N, BLOCK_K]: loaded straight into the 3-D
    # product's layout (2-D loads expanded afterwards cost a shared-memory round trip and a
    # barrier per step, which also kept the unrolled steps' loads from overlapping)
    offs_n = tl.arange(0, BLOCK_N)[None, :, None]
    n_mask = offs_n < N
    t3 = offs_t[:, None, None]
    rows = x_ptr + t3.to(tl.int64) * stride_xt
    rho3 = rho[:, None, None]
    acc = tl.zeros((BLOCK_T, BLOCK_N, BLOCK_K), dtype=tl.float64)
    for k0 in tl.static_range(0, SPLIT_K, BLOCK_K):
        offs_k = split * SPLIT_K + k0 + tl.arange(0, BLOCK_K)[None, None, :]
        k_mask = offs_k < K
        x = tl.load(rows + offs_k, mask=(t3 < T) & k_mask, other=0.0).to(tl.float32)
        xr = (x * rho3).to(tl.float64)  # the twin's fp32 (flat * rho), then .double()
        w = tl.load(fn_ptr + offs_n * stride_fn + offs_k, mask=n_mask & k_mask, other=0.0).to(tl.float32)
        acc += xr * w.to(tl.float64)  # exact products, fp64 sums
    offs_n = tl.arange(0, BLOCK_N)
    n_mask = offs_n < N
    out = mix_ptr + (offs_t[:, None] * NUM_SPLITS + split) * N + offs_n[None, :]
    tl.store(out, tl.sum(acc, axis=2), mask=t_mask[:, None] & n_mask[None, :])


@triton.jit
def _mix_values_2d(mix_ptr, offs, mask, N, NUM_SPLITS: tl.constexpr, SPLITS_PAD: tl.constexpr):
    """The mixes at `offs` [A, B] (token·S·N + mix index): each one's S split partials loaded as
    one [A, S, B] tile and summed (a fixed reduction tree), rounded once to fp32 (the twin's
    `.float()` of the fp64 matmul), returned as fp64 (its `.double()`)."""
    s = tl.arange(0, SPLITS_PAD)[None, :, None]
    part = tl.load(mix_ptr + offs[:, None, :] + s * N, mask=mask[:, None, :] & (s < NUM_SPLITS), other=0.0)
    return tl.sum(part, axis=1).to(tl.float32).to(tl.float64)


@triton.jit
def _mix_values_3d(mix_ptr, offs, mask, N, NUM_SPLITS: tl.constexpr, SPLITS_PAD: tl.constexpr):
    """`_mix_values_2d` for offs [A, B, C] (one [A, S, B, C] tile)."""
    s = tl.arange(0, SPLITS_PAD)[None, :, None, None]
    part = tl.load(mix_ptr + offs[:, None, :, :] + s * N, mask=mask[:, None, :, :] & (s < NUM_SPLITS), other=0.0)
    return tl.sum(part, axis=1).to(tl.float32).to(tl.float64)


@triton.jit
def _pick(x, idx, k, AXIS: tl.constexpr):
    """x's slice k along AXIS, exactly: one value and zeros, so the reduction's own order cannot
    change a bit. (Triton folds the -0.0 into +0.0, seen in the LLVM IR; v + 0.0 == v for every v
    but -0.0, which no softmax or Sinkhorn value is: they are positive or padding's +0.)"""
    return tl.sum(tl.where(idx == k, x, -0.0), axis=AXIS)


@triton.jit
def _take(x, k, AXIS: tl.constexpr):
    """x's slice k along AXIS, broadcast back along AXIS: a gather, so it moves values and changes
    none (on sm_90 one round of warp shuffles in `_comb_lanes`' layout)."""
    return tl.gather(x, tl.full(x.shape, k, tl.int32), axis=AXIS)


@triton.jit
def _row_sums4(c, jj):
    """Σ_j c[i, j] over 4 columns as (c0 + c2) + (c1 + c3): the butterfly that the sm_90 build's
    4-lane reduction over j did (shuffle xor 2, then xor 1). [4] over i.

    Picked with masked sums, not gathered: a gather along j wants another layout than the one
    along i (Triton 3.6 converted between them twice an iteration)."""
    return (_pick(c, jj, 0, 1) + _pick(c, jj, 2, 1)) + (_pick(c, jj, 1, 1) + _pick(c, jj, 3, 1))


@triton.jit
def _col_sums4(c):
    """Σ_i c[i, j] over 4 rows, in every (i, j), as ((c0 + c1) + c2) + c3: the in-thread order of
    the sm_90 build at Flash shapes (Triton 3.6 put i in one thread's registers there)."""
    return ((_take(c, 0, 0) + _take(c, 1, 0)) + _take(c, 2, 0)) + _take(c, 3, 0)


@triton.jit
def _comb_lanes(cm, base_ptr, scratch_ptr, s2, iters, HC: tl.constexpr, HC_EPS: tl.constexpr,
                USE_LIBDEVICE: tl.constexpr):
    """comb of one token (HC <= 4) from its rounded mixes `cm` [1, 4, 4], one element a thread.

    The sm_90 build of the register-tile version (Triton 3.6, Flash shapes) held a whole column
    of comb in each thread, so every Sinkhorn half-step ran 4 fp64 divisions one after another
    (each a MUFU.RCP64H, 8 dependent DFMAs and a slow-path branch), 156 in a row for 20 iterations.
    Here `cm` goes through the token's own comb row in global memory (exact: it is an fp32 value)
    and comes back loaded through scrambled offsets, so no load is vectorised and each thread
    holds one element: one division a thread per half-step (a column reaches every thread of it
    by one round of shuffles, a row by a 2-step butterfly). The sums are written out in the orders that
    build used (rows `_row_sums4`, columns `_col_sums4`; max is order-free), so the same fp64
    operations run in the same order and comb keeps its bits, under any layout."""
    eps = tl.full([], HC_EPS, tl.float64)
    lanes = tl.arange(0, 4)
    lane_ok = lanes < HC
    jj = lanes[None, :]
    ij = lanes[:, None] * HC + jj
    ok_ij = lane_ok[:, None] & lane_ok[None, :]
    tl.store(scratch_ptr + ij[None, :, :], cm.to(scratch_ptr.dtype.element_ty), mask=ok_ij[None, :, :])
    tl.debug_barrier()  # the stores above are visible to every thread of the program
    # ij again, but not provably contiguous (5·13 ≡ 1 mod 16): the loads get one element a thread
    idx = (ij * 5 % 16) * 13 % 16
    c = tl.load(scratch_ptr + idx, mask=ok_ij, other=0.0).to(tl.float64)
    cb = tl.load(base_ptr + 2 * HC + idx, mask=ok_ij, other=0.0).to(tl.float64)
    logits = tl.where(ok_ij, c * s2 + cb, float("-inf"))
    row_max = tl.where(lane_ok, tl.max(logits, axis=1), 0.0)  # padding rows: 0, not -inf - -inf
    e = tl.where(ok_ij, _exp_f64(logits - row_max[:, None], USE_LIBDEVICE), 0.0)
    row_sum = tl.where(lane_ok, _row_sums4(e, jj), 1.0)
    comb = tl.where(ok_ij, e / row_sum[:, None] + eps, 0.0)  # softmax over j, + eps
    comb = comb / (_col_sums4(comb) + eps)  # column normalise once
    for _ in range(1, iters):
        comb = comb / (_row_sums4(comb, jj)[:, None] + eps)  # rows
        comb = comb / (_col_sums4(comb) + eps)  # columns
    tl.debug_barrier()  # every thread has read its `cm` back before the first comb store lands
    tl.store(scratch_ptr + ij, comb.to(scratch_ptr.dtype.element_ty), mask=ok_ij)


@triton.jit
def _post_and_comb(mix_ptr, base_ptr, scale_ptr, post_ptr, comb_ptr, t0, offs_t, t_mask, mix_row, N, iters,
                   HC: tl.constexpr, HC_PAD: tl.constexpr, HC_EPS: tl.constexpr, NUM_SPLITS: tl.constexpr,
                   SPLITS_PAD: tl.constexpr, USE_LIBDEVICE: tl.constexpr, COMB_LANES: tl.constexpr):
    """post [BLOCK_T, HC] = 2·sigmoid(m·s1 + b) and comb [BLOCK_T, HC, HC] = Sinkhorn(softmax_j(m·s2 + b)
    + eps), fp64, stored as fp32. Padding lanes (HC < HC_PAD) and tokens past T are 0 through
    every step and never stored. comb[t, i, j]: i (axis 1) the old stream, j (axis 2) the new one.
    Stored in the outputs' dtype: fp32, or fp64 for the GPU test that compares the fp64 values."""
    eps = tl.full([], HC_EPS, tl.float64)
    lanes = tl.arange(0, HC_PAD)
    lane_ok = lanes < HC
    ok2 = t_mask[:, None] & lane_ok[None, :]
    s1 = tl.load(scale_ptr + 1).to(tl.float64)
    s2 = tl.load(scale_ptr + 2).to(tl.float64)
    pm = _mix_values_2d(mix_ptr, mix_row[:, None] + HC + lanes[None, :], ok2, N, NUM_SPLITS, SPLITS_PAD)
    pb = tl.load(base_ptr + HC + lanes, mask=lane_ok, other=0.0).to(tl.float64)
    post = 2.0 * _sigmoid_f64(pm * s1 + pb[None, :], USE_LIBDEVICE)
    tl.store(post_ptr + offs_t[:, None] * HC + lanes[None, :], post.to(post_ptr.dtype.element_ty), mask=ok2)

    ij = lanes[:, None] * HC + lanes[None, :]
    ok_ij = lane_ok[:, None] & lane_ok[None, :]
    ok3 = t_mask[:, None, None] & ok_ij[None, :, :]
    cm = _mix_values_3d(mix_ptr, mix_row[:, None, None] + 2 * HC + ij[None, :, :], ok3, N, NUM_SPLITS, SPLITS_PAD)
    if COMB_LANES:  # one token t0 (the launcher only sets it with POST_BLOCK_T == 1 and HC_PAD == 4)
        _comb_lanes(cm, base_ptr, comb_ptr + t0 * (HC * HC), s2, iters, HC, HC_EPS, USE_LIBDEVICE)
    else:
        cb = tl.load(base_ptr + 2 * HC + ij, mask=ok_ij, other=0.0).to(tl.float64)
        logits = tl.where(ok3, cm * s2 + cb[None, :, :], float("-inf"))
        row_max = tl.where(ok2, tl.max(logits, axis=2), 0.0)  # padding rows: 0, not -inf - -inf
        e = tl.where(ok3, _exp_f64(logits - row_max[:, :, None], USE_LIBDEVICE), 0.0)
        row_sum = tl.where(ok2, tl.sum(e, axis=2), 1.0)
        comb = tl.where(ok3, e / row_sum[:, :, None] + eps, 0.0)  # softmax over j, + eps
        comb = comb / (tl.sum(comb, axis=1)[:, None, :] + eps)  # column normalise once
        for _ in range(1, iters):
            comb = comb / (tl.sum(comb, axis=2)[:, :, None] + eps)  # rows
            comb = comb / (tl.sum(comb, axis=1)[:, None, :] + eps)  # columns
        tl.store(comb_ptr + offs_t[:, None, None] * (HC * HC) + ij[None, :, :], comb.to(comb_ptr.dtype.element_ty),
                 mask=ok3)


@triton.jit(do_not_specialize=["T"])
def _hc_finish_kernel(
    x_ptr, mix_ptr, base_ptr, scale_ptr, out_ptr, post_ptr, comb_ptr,
    T, D, N, iters, stride_xt, stride_xh, stride_ot,
    HC: tl.constexpr, HC_PAD: tl.constexpr, HC_EPS: tl.constexpr, NUM_SPLITS: tl.constexpr, SPLITS_PAD: tl.constexpr,
    BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr, WITH_POST: tl.constexpr, OUT_BF16: tl.constexpr,
    USE_LIBDEVICE: tl.constexpr, POST_BLOCK_T: tl.constexpr,
    PART: tl.constexpr = 0, PREFETCH: tl.constexpr = False, COMB_LANES: tl.constexpr = False,
    PDL: tl.constexpr = False, norm_w_ptr=None, NORM: tl.constexpr = False, NORM_EPS: tl.constexpr = 1e-6,
):
    """PART 0: block-input programs, then (WITH_POST) the post/comb programs in the grid's last
    BLOCK_T // POST_BLOCK_T columns; PART 1: the block-input programs only; PART 2: the post/comb
    programs only (grid column = sub-block), the launch that can run on a second stream.
    NORM (one D-block: BLOCK_D >= D): `out` gets the block input's weighted RMS norm instead of
    the block input (`_rms_norm_rows`)."""
    if PDL:  # "Early start" in triton.py: the next launch (the block's RMS norm) may start now
        tl.extra.cuda.gdc_launch_dependents()
    offs_t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    t_mask = offs_t < T
    pid_d = tl.program_id(1)
    lanes = tl.arange(0, HC_PAD)
    lane_ok = lanes < HC
    mix_row = offs_t * (NUM_SPLITS * N)
    if PART == 2:
        if PDL:  # the mixes are the previous launch's (a no-op on the side stream: a full dependency)
            tl.extra.cuda.gdc_wait()
        _post_programs(mix_ptr, base_ptr, scale_ptr, post_ptr, comb_ptr, T, N, iters, pid_d, HC, HC_PAD, HC_EPS,
                       NUM_SPLITS, SPLITS_PAD, BLOCK_T, USE_LIBDEVICE, POST_BLOCK_T, COMB_LANES)
    elif pid_d < tl.cdiv(D, BLOCK_D):
        if PREFETCH:  # the streams' rows of this block into L1, before the chain to `pre`
            for i in tl.static_range(HC):
                _prefetch_rows(x_ptr + i * stride_xh, offs_t, T, stride_xt, pid_d * BLOCK_D, D, BLOCK_D)
        if PDL:
            tl.extra.cuda.gdc_wait()
        # pre = sigmoid(m[:HC]·s0 + b[:HC]) + eps (fp64)  [BLOCK_T, HC_PAD]
        pm = _mix_values_2d(mix_ptr, mix_row[:, None] + lanes[None, :], t_mask[:, None] & lane_ok[None, :], N,
                            NUM_SPLITS, SPLITS_PAD)
        pb = tl.load(base_ptr + lanes, mask=lane_ok, other=0.0).to(tl.float64)
        s0 = tl.load(scale_ptr).to(tl.float64)
        pre = _sigmoid_f64(pm * s0 + pb[None, :], USE_LIBDEVICE) + tl.full([], HC_EPS, tl.float64)
        # block input: Σ_i pre_i·X_i in stream order from +0 (pre_i picked exactly: x + -0.0 == x)
        offs_d = pid_d * BLOCK_D + tl.arange(0, BLOCK_D)
        t64 = offs_t.to(tl.int64)
        tile = t_mask[:, None] & (offs_d < D)[None, :]
        rows = x_ptr + t64[:, None] * stride_xt + offs_d[None, :]
        acc = tl.zeros((BLOCK_T, BLOCK_D), dtype=tl.float64)
        for i in tl.static_range(HC):
            pre_i = tl.sum(tl.where(lanes[None, :] == i, pre, -0.0), axis=1)
            x = tl.load(rows + i * stride_xh, mask=tile, other=0.0).to(tl.float32).to(tl.float64)
            acc += pre_i[:, None] * x
        if NORM:
            _rms_norm_rows(acc, norm_w_ptr, out_ptr + t64[:, None] * stride_ot + offs_d[None, :], offs_d, tile, D,
                           NORM_EPS, OUT_BF16, USE_LIBDEVICE)
        else:
            _store_rounded(out_ptr + t64[:, None] * stride_ot + offs_d[None, :], acc, tile, OUT_BF16)
    elif WITH_POST and PART == 0:
        if PDL:
            tl.extra.cuda.gdc_wait()
        # the extra programs per token block (the launcher's last BLOCK_T // POST_BLOCK_T grid
        # columns): post and comb of POST_BLOCK_T tokens each, beside the block-input programs
        # rather than after one of them
        _post_programs(mix_ptr, base_ptr, scale_ptr, post_ptr, comb_ptr, T, N, iters, pid_d - tl.cdiv(D, BLOCK_D),
                       HC, HC_PAD, HC_EPS, NUM_SPLITS, SPLITS_PAD, BLOCK_T, USE_LIBDEVICE, POST_BLOCK_T, COMB_LANES)


@triton.jit
def _rms_norm_rows(acc, w_ptr, out_ptrs, offs_d, tile, D, EPS: tl.constexpr, OUT_BF16: tl.constexpr,
                   USE_LIBDEVICE: tl.constexpr):
    """The block input's weighted RMS norm, for rows held whole by this program: the fp64 block
    input `acc` [BLOCK_T, BLOCK_D] is first rounded as `_store_rounded` would store it (the value
    the norm kernel would read back), then `_rms_norm_kernel`'s operations in its order: the fp64
    sum of the exact squares, / D, + eps, rsqrt → fp32, (x·r)·w in fp32, rounded to the output
    dtype. Only the sum's reduction tree can differ from that kernel's (another tile shape), which
    moves the fp32 r only when the fp64 sum lies within an ulp of an fp32 rounding boundary."""
    xf = acc.to(tl.float32)
    if OUT_BF16:
        xf = round_bf16(xf)  # the stored block input's value
    xf = tl.where(tile, xf, 0.0)
    x64 = xf.to(tl.float64)
    shifted = tl.sum(x64 * x64, axis=1) / D + tl.full([], EPS, tl.float64)
    if USE_LIBDEVICE:
        r = libdevice.rsqrt(shifted).to(tl.float32)
    else:
        r = (1.0 / tl.sqrt(shifted)).to(tl.float32)
    w = tl.load(w_ptr + offs_d, mask=offs_d < D, other=0.0).to(tl.float32)
    y = (xf * r[:, None]) * w[None, :]
    if OUT_BF16:
        y = round_bf16(y)  # to nearest even as torch does; the cast below is then exact
    tl.store(out_ptrs, y.to(out_ptrs.dtype.element_ty), mask=tile)


@triton.jit
def _post_programs(mix_ptr, base_ptr, scale_ptr, post_ptr, comb_ptr, T, N, iters, sub,
                   HC: tl.constexpr, HC_PAD: tl.constexpr, HC_EPS: tl.constexpr, NUM_SPLITS: tl.constexpr,
                   SPLITS_PAD: tl.constexpr, BLOCK_T: tl.constexpr, USE_LIBDEVICE: tl.constexpr,
                   POST_BLOCK_T: tl.constexpr, COMB_LANES: tl.constexpr):
    """Post and comb of the token block's POST_BLOCK_T-token sub-block `sub`; a sub-block wholly
    past T has nothing to store."""
    t0 = tl.program_id(0) * BLOCK_T + sub * POST_BLOCK_T
    if t0 < T:
        offs_p = t0 + tl.arange(0, POST_BLOCK_T)
        _post_and_comb(mix_ptr, base_ptr, scale_ptr, post_ptr, comb_ptr, t0, offs_p, offs_p < T,
                       offs_p * (NUM_SPLITS * N), N, iters,
                       HC, HC_PAD, HC_EPS, NUM_SPLITS, SPLITS_PAD, USE_LIBDEVICE, COMB_LANES)


@triton.jit(do_not_specialize=["T"])
def _hc_post_kernel(
    f_ptr, a_ptr, x_ptr, post_ptr, comb_ptr, out_ptr, T, D,
    stride_ft, stride_at, stride_xt, stride_xh, stride_ot, stride_oh,
    HC: tl.constexpr, HC_PAD: tl.constexpr, BLOCK_D: tl.constexpr, OUT_BF16: tl.constexpr,
    HAS_ADDEND: tl.constexpr, PREFETCH: tl.constexpr = False, PDL: tl.constexpr = False,
):
    t = tl.program_id(0)
    offs_d = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    d_mask = offs_d < D
    lanes = tl.arange(0, HC_PAD)  # j, the output stream
    lane_ok = lanes < HC
    t64 = t.to(tl.int64)
    one = tl.arange(0, 1)
    d0 = tl.program_id(1) * BLOCK_D
    if PDL:  # nothing is read before the previous launches are done: the caller may have just
        tl.extra.cuda.gdc_wait()  # written any of the inputs (no ordinary launch in between here)
    if PREFETCH:  # every row this program reads into L1 first (3.6 issued some loads mid-chain)
        _prefetch_rows(x_ptr + t64 * stride_xt, lanes, HC, stride_xh, d0, D, BLOCK_D)
        _prefetch_rows(f_ptr + t64 * stride_ft, one, 1, 0, d0, D, BLOCK_D)
        if HAS_ADDEND:
            _prefetch_rows(a_ptr + t64 * stride_at, one, 1, 0, d0, D, BLOCK_D)
        _prefetch_rows(comb_ptr + t * (HC * HC), one, 1, 0, 0, HC * HC, HC_PAD * HC_PAD)
    f = tl.load(f_ptr + t64 * stride_ft + offs_d, mask=d_mask, other=0.0).to(tl.float32)
    if HAS_ADDEND:  # F = (F + A) in fp32, rounded to the stream dtype: the twin's torch add and cast
        f += tl.load(a_ptr + t64 * stride_at + offs_d, mask=d_mask, other=0.0).to(tl.float32)
        if OUT_BF16:
            f = round_bf16(f)
    f = f.to(tl.float64)
    post = tl.load(post_ptr + t * HC + lanes, mask=lane_ok, other=0.0).to(tl.float64)
    mixed = tl.zeros((HC_PAD, BLOCK_D), dtype=tl.float64)
    for i in tl.static_range(HC):  # Σ_i comb_ij·X_i, i in order (combᵀ @ X)
        c = tl.load(comb_ptr + t * (HC * HC) + i * HC + lanes, mask=lane_ok, other=0.0).to(tl.float64)
        x = tl.load(x_ptr + t64 * stride_xt + i * stride_xh + offs_d, mask=d_mask, other=0.0)
        mixed += c[:, None] * x.to(tl.float32).to(tl.float64)[None, :]
    out = post[:, None] * f[None, :] + mixed
    ptrs = out_ptr + t64 * stride_ot + lanes[:, None] * stride_oh + offs_d[None, :]
    _store_rounded(ptrs, out, lane_ok[:, None] & d_mask[None, :], OUT_BF16)
