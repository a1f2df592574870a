"""Private Triton code of the MoE router; launched only through `router.py`.

Two kernels. `_gate_logits_kernel` computes logits = x · Gᵀ in fp64 and rounds once to fp32,
as the torch twin does (`linear_ref` accumulates in fp64): with bf16 x and a bf16 gate every
product is exact in fp64 and the sums of a 4096-long row stay exact in the 53-bit mantissa for
any realistic spread of magnitudes, so the summation order (which differs from the twin's BLAS)
does not change the rounded fp32 result. The tile shape is fixed (never a function of the token
count), so a token's logits do not depend on the batch either way.

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


@triton.jit(do_not_specialize=['T'])  # run-time sizes: one compile for every value
def _gate_logits_kernel(
    x_ptr, w_ptr, out_ptr, T, E, D,
    stride_xt, stride_we, stride_ot,
    BLOCK_T: tl.constexpr, BLOCK_E: tl.constexpr, BLOCK_D: tl.constexpr,
):
    offs_t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    offs_e = tl.program_id(1) * BLOCK_E + tl.arange(0, BLOCK_E)
    t_mask = offs_t < T
    e_mask = offs_e < E
    acc = tl.zeros((BLOCK_T, BLOCK_E), dtype=tl.float64)
    for d0 in range(0, D, BLOCK_D):
        offs_d = d0 + tl.arange(0, BLOCK_D)
        d_mask = offs_d < D
        x = tl.load(x_ptr + offs_t[:, None] * stride_xt + offs_d[None, :],
                    mask=t_mask[:, None] & d_mask[None, :], other=0.0).to(tl.float32).to(tl.float64)
        w = tl.load(w_ptr + offs_e[:, None] * stride_we + offs_d[None, :],
                    mask=e_mask[:, None] & d_mask[None, :], other=0.0).to(tl.float32).to(tl.float64)
        acc += tl.sum(x[:, None, :] * w[None, :, :], axis=2)
    tl.store(out_ptr + offs_t[:, None] * stride_ot + offs_e[None, :], acc.to(tl.float32),
             mask=t_mask[:, None] & e_mask[None, :])


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
    logits_ptr, bias_ptr, tid2eid_ptr, token_ids_ptr, scaling_ptr, weights_ptr, ids_ptr,
    T, E,
    stride_lt, stride_h,
    TOP_K: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_E: tl.constexpr, KPAD: tl.constexpr,
    HASH: tl.constexpr, USE_LIBDEVICE: tl.constexpr,
):
    offs_t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    lanes = tl.arange(0, BLOCK_E)
    t_mask = offs_t < T
    e_mask = lanes < E
    logits = tl.load(logits_ptr + offs_t[:, None] * stride_lt + lanes[None, :],
                     mask=t_mask[:, None] & e_mask[None, :], other=0.0)
    scores = _sqrt_softplus_f64(logits, USE_LIBDEVICE)  # fp32 [BLOCK_T, BLOCK_E]
    slots = tl.arange(0, KPAD)
    chosen = tl.zeros((BLOCK_T, KPAD), dtype=tl.int32)
    picked = tl.zeros((BLOCK_T, KPAD), dtype=tl.float64)  # unbiased scores of the chosen experts
    if HASH:
        tok = tl.load(token_ids_ptr + offs_t, mask=t_mask, other=0).to(tl.int64)
        for j in tl.static_range(TOP_K):
            eid = tl.load(tid2eid_ptr + tok * stride_h + j, mask=t_mask, other=0).to(tl.int32)
            hit = lanes[None, :] == eid[:, None]
            s_j = tl.sum(tl.where(hit, scores, 0.0), axis=1)  # exactly one lane contributes
            chosen = tl.where(slots[None, :] == j, eid[:, None], chosen)
            picked = tl.where(slots[None, :] == j, s_j.to(tl.float64)[:, None], picked)
    else:
        bias = tl.load(bias_ptr + lanes, mask=e_mask, other=0.0)
        biased = tl.where(e_mask[None, :], scores + bias[None, :], float("-inf"))
        for j in tl.static_range(TOP_K):
            eid = tl.argmax(biased, axis=1, tie_break_left=True).to(tl.int32)
            hit = lanes[None, :] == eid[:, None]
            s_j = tl.sum(tl.where(hit, scores, 0.0), axis=1)
            chosen = tl.where(slots[None, :] == j, eid[:, None], chosen)
            picked = tl.where(slots[None, :] == j, s_j.to(tl.float64)[:, None], picked)
            biased = tl.where(hit, float("-inf"), biased)
    # fp64: a sum of k fp32 values is exact in practice, so its order does not matter
    total = tl.sum(picked, axis=1)
    routed_scaling = tl.load(scaling_ptr)  # fp64 (a Python float argument would arrive as fp32)
    weights = (picked / total[:, None] * routed_scaling).to(tl.float32)
    out_mask = t_mask[:, None] & (slots[None, :] < TOP_K)
    tl.store(weights_ptr + offs_t[:, None] * TOP_K + slots[None, :], weights, mask=out_mask)
    tl.store(ids_ptr + offs_t[:, None] * TOP_K + slots[None, :], chosen.to(tl.int64), mask=out_mask)
