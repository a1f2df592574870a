"""RMS normalisations (spec §2), the torch twins: weight applied in fp32, cast back once.

The mean of squares is accumulated in fp64: torch splits a long row reduction across threads
when there are few rows, so an fp32 sum's order (and last bit) would depend on the batch size.
"""

from __future__ import annotations

import torch


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """y = x * rsqrt(mean(x²) + eps) * w, computed in fp32 and returned in x's dtype."""
    xf = x.float()
    y = xf * _rsqrt_mean_square(xf, eps)
    return (y * weight.float()).to(x.dtype)


def unweighted_rms_norm(x: torch.Tensor, eps: float) -> torch.Tensor:
    """The weightless RMS used per query head after wq_b (and inside mHC)."""
    xf = x.float()
    return (xf * _rsqrt_mean_square(xf, eps)).to(x.dtype)


def _rsqrt_mean_square(xf: torch.Tensor, eps: float) -> torch.Tensor:
    return torch.rsqrt(xf.double().square().mean(-1, keepdim=True) + eps).float()
