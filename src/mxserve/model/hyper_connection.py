"""Manifold-constrained hyper-connections (mHC, spec §3.3 and §3.6), as the model names them.

The math (one copy, the spec) lives in `mxserve.kernels.hyper_connection.reference`; this module
re-exports it under the model's names so existing imports keep working. The model itself calls
the ops through its KernelSet (`kernels.hc_pre`, `kernels.hc_post`, `kernels.hc_head`), whose
defaults are these twins; the Triton backend is chosen at load (op "hc").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from mxserve.kernels.hyper_connection.reference import HyperConnectionWeights
from mxserve.kernels.hyper_connection.reference import hc_head_ref as hc_head
from mxserve.kernels.hyper_connection.reference import hc_post_ref as hc_post
from mxserve.kernels.hyper_connection.reference import hc_pre_ref as hc_pre

if TYPE_CHECKING:
    from mxserve.model.kernel_set import KernelSet

__all__ = ["HyperConnectionWeights", "hc_head", "hc_head_normed", "hc_post", "hc_pre", "hc_pre_normed"]


def hc_pre_normed(kernels: KernelSet, streams: torch.Tensor, w: HyperConnectionWeights, norm_weight: torch.Tensor, *,
                  hc_eps: float, rms_eps: float, sinkhorn_iters: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A block's start: hc_pre, then the block norm of its input → (normed input, post, comb), through
    the set's fused `hc_pre_norm` where it has one, else its `hc_pre` and `rms_norm`."""
    if kernels.hc_pre_norm is not None:
        return kernels.hc_pre_norm(streams, w, norm_weight, hc_eps=hc_eps, rms_eps=rms_eps,
                                   sinkhorn_iters=sinkhorn_iters)
    block_in, post, comb = kernels.hc_pre(streams, w, hc_eps=hc_eps, rms_eps=rms_eps, sinkhorn_iters=sinkhorn_iters)
    return kernels.rms_norm(block_in, norm_weight, rms_eps), post, comb


def hc_head_normed(kernels: KernelSet, streams: torch.Tensor, head_weights: tuple[torch.Tensor, ...],
                   norm_weight: torch.Tensor, *, hc_eps: float, rms_eps: float) -> torch.Tensor:
    """The head's input: hc_head's collapse (`head_weights` = fn, base, scale), then the final norm,
    through the set's fused `hc_head_norm` where it has one."""
    if kernels.hc_head_norm is not None:
        return kernels.hc_head_norm(streams, *head_weights, norm_weight, hc_eps=hc_eps, rms_eps=rms_eps)
    return kernels.rms_norm(kernels.hc_head(streams, *head_weights, hc_eps=hc_eps, rms_eps=rms_eps), norm_weight,
                            rms_eps)
