"""MoE routing and routed experts. Backends: "reference" (torch)."""

from mxserve.kernels.moe.reference import (
    ExpertWeights,
    expert_ffn_ref,
    moe_experts_ref,
    route_ref,
    sqrt_softplus,
    swiglu_clamped,
)

__all__ = ["ExpertWeights", "expert_ffn_ref", "moe_experts_ref", "route_ref", "sqrt_softplus", "swiglu_clamped"]
