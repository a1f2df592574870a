"""Linear on an unquantized BF16 weight (compressor, indexer weights_proj, router-sized and head
projections): `linear_bf16(x, weight, backend=)` → fp32.

Backends: "reference" (`linear_ref`: fp64 accumulation, the spec) and "triton" (the block-dot
kernel of `linear_fp8_block` with bf16 weights: bf16 tensor cores, x as bf16 hi + lo pieces for
fp32 x, fixed 128-K groups and split-K from (N, K) only, so rows are batch-invariant). Only BF16
weights: an fp32 weight would be rounded, which the reference does not do.
"""

from __future__ import annotations

import torch

from mxserve.kernels.linear.reference import linear_ref

BACKENDS = ("reference", "triton")


def check_bf16_weight(weight: object) -> torch.Tensor:
    if not isinstance(weight, torch.Tensor):
        raise TypeError(f"linear_bf16 needs a torch.Tensor weight, got {type(weight).__name__}")
    if weight.dtype != torch.bfloat16 or weight.dim() != 2:
        raise ValueError(f"linear_bf16 needs a 2-D bfloat16 weight [N, K], got {weight.dtype=} {tuple(weight.shape)=}")
    return weight


def linear_bf16_ref(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x [..., K] float · W[N, K]ᵀ → fp32 [..., N], fp64 accumulation rounded once."""
    return linear_ref(x, check_bf16_weight(weight))


def linear_bf16(x: torch.Tensor, weight: torch.Tensor, *, backend: str = "reference") -> torch.Tensor:
    if backend == "reference":
        return linear_bf16_ref(x, weight)
    if backend == "triton":
        from mxserve.kernels.linear_bf16.triton import linear_bf16_triton

        return linear_bf16_triton(x, weight)
    raise ValueError(f"linear_bf16: unknown backend {backend!r}; known: {list(BACKENDS)}")


__all__ = ["BACKENDS", "check_bf16_weight", "linear_bf16", "linear_bf16_ref"]
