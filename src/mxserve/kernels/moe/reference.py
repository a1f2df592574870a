"""Torch reference for the DeepSeek-V4 MoE: routing and the routed experts (spec §3.5).

Routing (fp32): s = sqrt(softplus(x·Gᵀ)); experts = tid2eid[token] in hash layers, else the
top-k of s + bias (bias selects only); weights = s[experts] / Σ s[experts] · routed_scaling
(normalised in fp64 and rounded once, so every backend can match it bit for bit).
Ties in the biased scores are broken by the lower expert id (a stable descending sort), the
same rule every backend must follow.

Experts: clamped SwiGLU — gate ≤ limit (upper clamp only), up in [−limit, limit],
h = silu(gate) · up · routing weight (the weight multiplies h before w2, as the release
reference does), y = h · w2ᵀ. Per token the expert outputs are summed in ascending expert id
order, so a token's result does not depend on which other tokens share the call.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from mxserve.kernels.linear import Weight, linear_ref


@dataclass(frozen=True)
class ExpertWeights:
    w1: Weight  # gate [I, D]
    w2: Weight  # down [D, I]
    w3: Weight  # up [I, D]


def sqrt_softplus(logits: torch.Tensor) -> torch.Tensor:
    # fp64 then rounded: fp32 transcendentals on short rows take a batch-size dependent code path
    return torch.sqrt(F.softplus(logits.double())).float()


def route_ref(
    x: torch.Tensor,
    gate_weight: torch.Tensor,
    *,
    top_k: int,
    routed_scaling: float,
    bias: torch.Tensor | None = None,
    tid2eid: torch.Tensor | None = None,
    token_ids: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """x [T, D] → (weights fp32 [T, k], expert ids int64 [T, k]). Exactly one of bias / tid2eid."""
    if (bias is None) == (tid2eid is None):
        raise ValueError("route: pass exactly one of bias (learned routing) or tid2eid (hash routing)")
    scores = sqrt_softplus(linear_ref(x, gate_weight))  # [T, E], fp64-accumulated like every reference GEMM
    if tid2eid is not None:
        if token_ids is None:
            raise ValueError("route: hash routing needs token_ids")
        expert_ids = tid2eid[token_ids].long()
    else:
        order = torch.sort(scores + bias.float(), dim=-1, descending=True, stable=True).indices
        expert_ids = order[:, :top_k]
    # normalise and scale in fp64, round once: an fp32 row sum would take torch's reduction order,
    # which differs between CPU and CUDA builds; k fp32 terms sum exactly in fp64 in any order
    picked = scores.gather(1, expert_ids).double()
    weights = (picked / picked.sum(dim=-1, keepdim=True) * routed_scaling).float()
    return weights, expert_ids


def swiglu_clamped(gate: torch.Tensor, up: torch.Tensor, limit: float) -> torch.Tensor:
    gate, up = gate.double(), up.double()  # fp64, rounded once (batch-size independent silu)
    return (F.silu(gate.clamp(max=limit)) * up.clamp(min=-limit, max=limit)).float()


def expert_ffn_ref(
    x: torch.Tensor, w: ExpertWeights, *, limit: float, quantize_inputs: bool, row_scale: torch.Tensor | None = None,
    hidden_dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """One SwiGLU expert on rows x [n, D] → fp32 [n, D]; `row_scale` [n] multiplies h before w2."""
    h = swiglu_clamped(
        linear_ref(x, w.w1, quantize_input=quantize_inputs), linear_ref(x, w.w3, quantize_input=quantize_inputs), limit
    )
    if row_scale is not None:
        h = h * row_scale[:, None]
    return linear_ref(h.to(hidden_dtype), w.w2, quantize_input=quantize_inputs)


def moe_experts_ref(
    x: torch.Tensor,
    expert_ids: torch.Tensor,
    weights: torch.Tensor,
    experts: Sequence[ExpertWeights],
    *,
    limit: float,
    quantize_inputs: bool,
    hidden_dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Σ_k weight_k · expert_{id_k}(x) per token → fp32 [T, D]."""
    out = torch.zeros(x.shape[0], x.shape[1], dtype=torch.float32, device=x.device)
    for expert_id in torch.unique(expert_ids).tolist():  # ascending: fixed per-token sum order
        token_idx, slot = torch.nonzero(expert_ids == expert_id, as_tuple=True)
        y = expert_ffn_ref(
            x[token_idx], experts[expert_id], limit=limit, quantize_inputs=quantize_inputs,
            row_scale=weights[token_idx, slot], hidden_dtype=hidden_dtype,
        )
        out.index_add_(0, token_idx, y)
    return out
