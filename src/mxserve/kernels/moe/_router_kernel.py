"""Private Triton code of the MoE router; launched only through `router.py`.

Gate logits = x · Gᵀ in fp64, rounded once to fp32, as the torch twin does (`linear_ref`
accumulates in fp64): with bf16 x and a bf16 gate every product is exact in fp64 and the sums
of a 4096-long row stay exact in the 53-bit mantissa for any realistic spread of magnitudes, so
the summation order (which differs from the twin's BLAS) does not change the rounded fp32
result. The work is split over D so that a decode step (T = 1..64) fills the GPU:
`_gate_partials_kernel` writes fp64 partial sums part[s, t, e] over the D-chunks
s = [s·CHUNK, (s+1)·CHUNK), and the partials are summed in the fixed order s = 0, 1, 2, …
(`_sum_splits`) by `_gate_logits_kernel` (fp32 logits) or inside `_route_select_kernel`. Tile
shapes, the chunk and the split count never depend on the token count, so a token's logits do
not depend on the batch either way.

`_route_select_kernel` turns one token row of logits into (weights, expert ids):
s = sqrt(softplus(l)) in fp64 rounded to fp32 (the twin's `sqrt_softplus`), then either the
hash table row `tid2eid[token]` or the top-k of the fp32 sum s + bias, picked one at a time with
`argmax(tie_break_left)`: among equal biased scores the lower expert id wins, which is the
twin's stable descending sort. Weights are the unbiased s of the chosen experts, normalised and
scaled in fp64 and rounded once (the twin's rule). Padding lanes past the expert count are
-inf for selection and never chosen.

fp64 transcendentals: on the GPU the libdevice `exp` / `log1p` / `sqrt_rn` (the same library
CUDA torch uses); the interpreter cannot call libdevice, so there `log1p(y)` is computed as
log(u)·y/(u−1) with u = 1 + y (Goldberg's form, a few fp64 ulps), which rounds to the same fp32.
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton.language.extra import libdevice

from mxserve.kernels.early_start import wait_for_previous


@triton.jit(do_not_specialize=['T'])  # run-time sizes: one compile for every value
def _gate_partials_kernel(
    x_ptr, w_ptr, part_ptr, T, E, D,
    stride_xt, stride_we,
    BLOCK_T: tl.constexpr, BLOCK_E: tl.constexpr, BLOCK_D: tl.constexpr, SUB_BLOCKS: tl.constexpr,
    PDL: tl.constexpr = False,  # early start: kernels/early_start.py
):
    """part[s, t, e] = Σ x[t, d]·G[e, d] over d in chunk s (CHUNK = SUB_BLOCKS·BLOCK_D), fp64.

    Grid (token blocks, expert blocks, chunks). One program loads its whole chunk at once (every
    load in flight together) as 2D tiles whose rows are (sub-block, token) and (sub-block,
    expert), sub-block major, then views them as [SUB_BLOCKS, BLOCK_T, 1, BLOCK_D] and
    [SUB_BLOCKS, 1, BLOCK_E, BLOCK_D]. Why 2D: the coalescing pass gives a 2D tile BLOCK_D/8 lanes
    along d and the rest of the warp along rows, so after the reshape the sub-blocks sit in each
    thread's registers (their sum is in-thread) and only BLOCK_D/8 lanes share a dot product. A 3D
    pointer tensor would leave the order of its non-contiguous dims to a tie that Triton 3.6 and
    3.9 break in opposite ways (one of them puts lanes along the sub-blocks: 25x the shuffles).
    Every product of two fp32-or-narrower values is exact in fp64 (24 + 24 <= 53 bits), so
    contracting a multiply and an add into an FMA changes no bit; the sums are exact for realistic
    data (module docstring).
    """
    wait_for_previous(PDL)  # before any load or store (kernels/early_start.py)
    chunk: tl.constexpr = SUB_BLOCKS * BLOCK_D
    split = tl.program_id(2)
    lanes_d = tl.arange(0, BLOCK_D)
    rows_x = tl.arange(0, SUB_BLOCKS * BLOCK_T)
    rows_w = tl.arange(0, SUB_BLOCKS * BLOCK_E)
    tok_x = tl.program_id(0) * BLOCK_T + rows_x % BLOCK_T
    exp_w = tl.program_id(1) * BLOCK_E + rows_w % BLOCK_E
    d_x = (split * chunk + (rows_x // BLOCK_T) * BLOCK_D)[:, None] + lanes_d[None, :]
    d_w = (split * chunk + (rows_w // BLOCK_E) * BLOCK_D)[:, None] + lanes_d[None, :]
    x = tl.load(x_ptr + tok_x[:, None] * stride_xt + d_x, mask=(tok_x[:, None] < T) & (d_x < D), other=0.0)
    w = tl.load(w_ptr + exp_w[:, None] * stride_we + d_w, mask=(exp_w[:, None] < E) & (d_w < D), other=0.0)
    x = tl.reshape(x.to(tl.float32).to(tl.float64), (SUB_BLOCKS, BLOCK_T, 1, BLOCK_D))
    w = tl.reshape(w.to(tl.float32).to(tl.float64), (SUB_BLOCKS, 1, BLOCK_E, BLOCK_D))
    part = tl.sum(tl.sum(x * w, axis=0), axis=2)  # sub-blocks first (in-thread), then d
    offs_t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    offs_e = tl.program_id(1) * BLOCK_E + tl.arange(0, BLOCK_E)
    tl.store(part_ptr + split * T * E + offs_t[:, None] * E + offs_e[None, :], part,
             mask=(offs_t[:, None] < T) & (offs_e[None, :] < E))


@triton.jit
def _sum_splits(part_ptr, offs_t, offs_e, mask, T, E, NUM_SPLITS: tl.constexpr):
    """Σ_s part[s, t, e] in fp64, in the order s = 0, 1, …, NUM_SPLITS − 1 (never a function of T).
    Unrolled: the NUM_SPLITS loads are independent, so they are in flight together."""
    ptrs = part_ptr + offs_t[:, None] * E + offs_e[None, :]
    acc = tl.load(ptrs, mask=mask, other=0.0)
    for s in tl.static_range(1, NUM_SPLITS):
        acc += tl.load(ptrs + s * T * E, mask=mask, other=0.0)
    return acc


@triton.jit(do_not_specialize=['T'])  # run-time sizes: one compile for every value
def _gate_logits_kernel(
    part_ptr, out_ptr, T, E, stride_ot,
    NUM_SPLITS: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_E: tl.constexpr,
):
    """out[t, e] = fp32(Σ_s part[s, t, e]): the logits alone (`gate_logits_triton`)."""
    offs_t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    offs_e = tl.program_id(1) * BLOCK_E + tl.arange(0, BLOCK_E)
    mask = (offs_t[:, None] < T) & (offs_e[None, :] < E)
    logits = _sum_splits(part_ptr, offs_t, offs_e, mask, T, E, NUM_SPLITS)
    tl.store(out_ptr + offs_t[:, None] * stride_ot + offs_e[None, :], logits.to(tl.float32), mask=mask)


@triton.jit
def _sqrt_softplus_f64(logits, USE_LIBDEVICE: tl.constexpr):
    """fp32 logits → fp32 sqrt(softplus(l)) computed in fp64 (torch's softplus: l above 20 is l)."""
    lg = logits.to(tl.float64)
    if USE_LIBDEVICE:
        sp = libdevice.log1p(libdevice.exp(lg))
        root = libdevice.sqrt_rn(tl.where(lg > 20.0, lg, sp))
    else:
        y = tl.exp(lg)
        u = 1.0 + y
        sp = tl.where(u == 1.0, y, tl.log(u) * (y / (u - 1.0)))
        root = tl.sqrt(tl.where(lg > 20.0, lg, sp))
    return root.to(tl.float32)


@triton.jit(do_not_specialize=['T'])  # run-time sizes: one compile for every value
def _route_select_kernel(
    part_ptr, bias_ptr, tid2eid_ptr, token_ids_ptr, scaling_ptr, weights_ptr, ids_ptr,
    T, E, stride_h,
    NUM_SPLITS: tl.constexpr, TOP_K: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_E: tl.constexpr,
    KPAD: tl.constexpr, HASH: tl.constexpr, USE_LIBDEVICE: tl.constexpr,
    PDL: tl.constexpr = False,  # early start: kernels/early_start.py
):
    """Gate partials [NUM_SPLITS, T, E] → weights fp32 [T, TOP_K], expert ids int64 [T, TOP_K]."""
    wait_for_previous(PDL)  # before any load or store (kernels/early_start.py)
    offs_t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    lanes = tl.arange(0, BLOCK_E)
    t_mask = offs_t < T
    e_mask = lanes < E
    logits = _sum_splits(part_ptr, offs_t, lanes, t_mask[:, None] & e_mask[None, :], T, E, NUM_SPLITS)
    scores = _sqrt_softplus_f64(logits.to(tl.float32), USE_LIBDEVICE)  # fp32 [BLOCK_T, BLOCK_E]
    routed_scaling = tl.load(scaling_ptr)  # fp64 (a Python float argument would arrive as fp32)
    if HASH:
        slots = tl.arange(0, KPAD)
        chosen = tl.zeros((BLOCK_T, KPAD), dtype=tl.int32)
        picked = tl.zeros((BLOCK_T, KPAD), dtype=tl.float64)  # unbiased scores of the chosen experts
        tok = tl.load(token_ids_ptr + offs_t, mask=t_mask, other=0).to(tl.int64)
        for j in tl.static_range(TOP_K):
            eid = tl.load(tid2eid_ptr + tok * stride_h + j, mask=t_mask, other=0).to(tl.int32)
            hit = lanes[None, :] == eid[:, None]
            s_j = tl.sum(tl.where(hit, scores, 0.0), axis=1)  # exactly one lane contributes
            chosen = tl.where(slots[None, :] == j, eid[:, None], chosen)
            picked = tl.where(slots[None, :] == j, s_j.to(tl.float64)[:, None], picked)
        # fp64: a sum of k fp32 values is exact in practice, so its order does not matter
        total = tl.sum(picked, axis=1)
        weights = (picked / total[:, None] * routed_scaling).to(tl.float32)
        out_mask = t_mask[:, None] & (slots[None, :] < TOP_K)
        tl.store(weights_ptr + offs_t[:, None] * TOP_K + slots[None, :], weights, mask=out_mask)
        tl.store(ids_ptr + offs_t[:, None] * TOP_K + slots[None, :], chosen.to(tl.int64), mask=out_mask)
    else:
        bias = tl.load(bias_ptr + lanes, mask=e_mask, other=0.0)
        biased = tl.where(e_mask[None, :], scores + bias[None, :], float("-inf"))
        # each lane remembers the slot it was chosen for (-1: not chosen); the weights are then
        # computed per lane and scattered to their slots, one reduction (the total) instead of k
        slot = tl.full((BLOCK_T, BLOCK_E), -1, dtype=tl.int32)
        for j in tl.static_range(TOP_K):
            eid = tl.argmax(biased, axis=1, tie_break_left=True).to(tl.int32)
            hit = lanes[None, :] == eid[:, None]
            slot = tl.where(hit, j, slot)
            biased = tl.where(hit, float("-inf"), biased)
        is_chosen = slot >= 0
        s64 = scores.to(tl.float64)
        # fp64: a sum of k fp32 values (and zeros) is exact in practice, so its order does not matter
        total = tl.sum(tl.where(is_chosen, s64, 0.0), axis=1)
        weights = (s64 / total[:, None] * routed_scaling).to(tl.float32)
        out = offs_t[:, None] * TOP_K + slot
        out_mask = t_mask[:, None] & is_chosen
        tl.store(weights_ptr + out, weights, mask=out_mask)
        tl.store(ids_ptr + out, tl.broadcast_to(lanes[None, :], (BLOCK_T, BLOCK_E)).to(tl.int64), mask=out_mask)
