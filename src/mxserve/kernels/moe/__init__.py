"""MoE routing and routed experts (spec §3.5). Backends: "reference" (torch, the spec) and
"triton" (`router.py`, `align.py`, `experts.py`; variants "bf16" / "w4a8", optional FP8 repack).

`route(..., backend=)` and `moe_experts(..., backend=)` keep the references' signatures. Which
backend a layer uses is decided once at load by `mxserve.kernels.moe.chooser` (`choose_moe`),
which also gives the KernelSet slot callables (`moe_kernel_slots`). Triton is imported only when
a Triton backend is used.
"""

from __future__ import annotations

import torch

from mxserve.kernels.moe.reference import (
    ExpertWeights,
    expert_ffn_ref,
    moe_experts_ref,
    route_ref,
    sqrt_softplus,
    swiglu_clamped,
)

BACKENDS = ("reference", "triton")


def route(x: torch.Tensor, gate_weight: torch.Tensor, *, backend: str = "reference", **kwargs):
    """(weights fp32 [T, k], expert ids int64 [T, k]); see `route_ref` for the keyword arguments."""
    if backend == "reference":
        return route_ref(x, gate_weight, **kwargs)
    if backend == "triton":
        from mxserve.kernels.moe.router import route_triton

        return route_triton(x, gate_weight, **kwargs)
    raise ValueError(f"route: unknown backend {backend!r}; known: {list(BACKENDS)}")


def moe_experts(x, expert_ids, weights, experts, *, backend: str = "reference", **kwargs) -> torch.Tensor:
    """Σ_k weight_k · expert_{id_k}(x) per token → fp32 [T, D]; see `moe_experts_ref` (the Triton
    backend also takes variant="bf16"|"w4a8", repack_fp8=, tile=)."""
    if backend == "reference":
        return moe_experts_ref(x, expert_ids, weights, experts, **kwargs)
    if backend == "triton":
        from mxserve.kernels.moe.experts import moe_experts_triton

        return moe_experts_triton(x, expert_ids, weights, experts, **kwargs)
    raise ValueError(f"moe_experts: unknown backend {backend!r}; known: {list(BACKENDS)}")


__all__ = [
    "BACKENDS",
    "ExpertWeights",
    "expert_ffn_ref",
    "moe_experts",
    "moe_experts_ref",
    "route",
    "route_ref",
    "sqrt_softplus",
    "swiglu_clamped",
]
