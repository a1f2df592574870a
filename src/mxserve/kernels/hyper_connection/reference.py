"""Manifold-constrained hyper-connections (mHC, spec §3.3 and §3.6): the torch twins, the spec.

The residual is `hc_mult` parallel streams [T, hc, D]. Before a block, `hc_pre` collapses them
into the block input with learned per-token weights and also returns `post` (how the block output
is spread back) and `comb` (a Sinkhorn-normalised hc×hc mix of the old streams). `hc_post`
applies them: X'_j = post_j·F + Σ_i comb_ij·X_i — a sum over the FIRST index (combᵀ @ X);
comb is doubly stochastic but not symmetric, so the transpose matters. `hc_head` is the final
collapse (pre weights only).

Rounding points (the numerics contract every backend follows): the mean of squares and the
mixes are accumulated in fp64; `rho` is rounded to fp32, `flat * rho` is an fp32 product rounded
BEFORE the fp64 matmul, the mixes are rounded once to fp32; the weight math (sigmoid, softmax,
Sinkhorn) and the stream sums run in fp64 and are rounded once, to fp32 (post, comb) or the
streams' dtype (block input, new streams). The model reaches these through its KernelSet
(`hc_pre`, `hc_post`, `hc_head` slots); `mxserve.model.hyper_connection` re-exports them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mxserve.kernels.rms_norm.reference import rms_norm


@dataclass(frozen=True)
class HyperConnectionWeights:
    fn: torch.Tensor  # [(2 + hc) * hc, hc * D] fp32
    base: torch.Tensor  # [(2 + hc) * hc] fp32
    scale: torch.Tensor  # [3] fp32


def _mixes(streams: torch.Tensor, fn: torch.Tensor, eps: float) -> torch.Tensor:
    flat = streams.flatten(1).float()  # [T, hc*D]
    rho = torch.rsqrt(flat.double().square().mean(-1, keepdim=True) + eps).float()
    # fp64 accumulation keeps each token's mixes independent of the batch (see kernels/linear)
    return ((flat * rho).double() @ fn.double().t()).float()


def hc_pre_ref(
    streams: torch.Tensor, w: HyperConnectionWeights, *, hc_eps: float, rms_eps: float, sinkhorn_iters: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """streams [T, hc, D] → (block input [T, D] in streams' dtype, post [T, hc], comb [T, hc, hc] fp32)."""
    hc = streams.shape[1]
    # fp64 for the tiny [T, 24] weight math: fp32 sigmoid/softmax on a few elements take the
    # scalar tail path, so their last bit would depend on the number of tokens.
    m = _mixes(streams, w.fn, rms_eps).double()
    pre_m, post_m, comb_m = m.split([hc, hc, hc * hc], dim=-1)
    pre_b, post_b, comb_b = w.base.double().split([hc, hc, hc * hc])
    scale = w.scale.double()
    pre = torch.sigmoid(pre_m * scale[0] + pre_b) + hc_eps
    post = 2 * torch.sigmoid(post_m * scale[1] + post_b)
    comb = torch.softmax((comb_m * scale[2] + comb_b).view(-1, hc, hc), dim=-1) + hc_eps
    comb = comb / (comb.sum(dim=-2, keepdim=True) + hc_eps)  # column normalise once
    for _ in range(sinkhorn_iters - 1):
        comb = comb / (comb.sum(dim=-1, keepdim=True) + hc_eps)  # rows
        comb = comb / (comb.sum(dim=-2, keepdim=True) + hc_eps)  # columns
    block_input = (pre.unsqueeze(-1) * streams.double()).sum(dim=1).to(streams.dtype)
    return block_input, post.float(), comb.float()


def hc_post_ref(block_out: torch.Tensor, streams: torch.Tensor, post: torch.Tensor, comb: torch.Tensor, *,
                addend: torch.Tensor | None = None) -> torch.Tensor:
    """X'_j = post_j · F + Σ_i comb_ij · X_i (fp32 math, streams' dtype out). F is `block_out`, or with
    `addend` (the MoE's shared expert) (block_out + addend) rounded to the streams' dtype: the
    block's output as the model would have formed it before the call (one launch less on GPUs)."""
    if addend is not None:
        block_out = (block_out + addend).to(streams.dtype)
    mixed = torch.einsum("tij,tid->tjd", comb.double(), streams.double())  # fp64: batch-size independent
    return (post.double().unsqueeze(-1) * block_out.double().unsqueeze(1) + mixed).to(streams.dtype)


def hc_head_ref(
    streams: torch.Tensor, fn: torch.Tensor, base: torch.Tensor, scale: torch.Tensor, *, hc_eps: float, rms_eps: float
) -> torch.Tensor:
    """The final collapse (HyperHead): pre weights only, no Sinkhorn, no post."""
    m = _mixes(streams, fn, rms_eps).double()
    pre = torch.sigmoid(m * scale.double()[0] + base.double()) + hc_eps
    return (pre.unsqueeze(-1) * streams.double()).sum(dim=1).to(streams.dtype)


def hc_pre_norm_ref(streams: torch.Tensor, w: HyperConnectionWeights, norm_weight: torch.Tensor, *, hc_eps: float,
                    rms_eps: float, sinkhorn_iters: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`hc_pre_ref`, then the block's weighted RMS norm of the block input (eps `rms_eps`, the
    model's one norm epsilon): (normed block input [T, D], post, comb). The pair a block starts with."""
    block_in, post, comb = hc_pre_ref(streams, w, hc_eps=hc_eps, rms_eps=rms_eps, sinkhorn_iters=sinkhorn_iters)
    return rms_norm(block_in, norm_weight, rms_eps), post, comb


def hc_head_norm_ref(streams: torch.Tensor, fn: torch.Tensor, base: torch.Tensor, scale: torch.Tensor,
                     norm_weight: torch.Tensor, *, hc_eps: float, rms_eps: float) -> torch.Tensor:
    """`hc_head_ref`, then the final weighted RMS norm (eps `rms_eps`): the head's input [T, D]."""
    return rms_norm(hc_head_ref(streams, fn, base, scale, hc_eps=hc_eps, rms_eps=rms_eps), norm_weight, rms_eps)
