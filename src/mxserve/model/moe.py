"""The MoE block of a layer (spec §3.5): router, routed experts, shared expert.

Hash layers route by `tid2eid[token_id]`; learned layers by the top-k of sqrt-softplus scores
plus the selection-only bias. The shared expert uses the same clamped SwiGLU with weight 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mxserve.config import ModelConfig
from mxserve.kernels import side_streams
from mxserve.kernels.moe import ExpertWeights
from mxserve.model.decode_branches import SHARED
from mxserve.model.kernel_set import REFERENCE_KERNELS, KernelSet
from mxserve.model.numerics import NumericPolicy


@dataclass(frozen=True)
class MoEWeights:
    gate: torch.Tensor  # [E, D]
    bias: torch.Tensor | None  # [E] fp32, learned layers
    tid2eid: torch.Tensor | None  # [V, k] int64, hash layers
    experts: tuple[ExpertWeights, ...]
    shared: ExpertWeights | None


def moe_forward(
    x: torch.Tensor, token_ids: torch.Tensor, w: MoEWeights, config: ModelConfig, policy: NumericPolicy,
    kernels: KernelSet = REFERENCE_KERNELS,
) -> torch.Tensor:
    """x [T, D] (normed, stream dtype), token_ids [T] → [T, D] stream dtype."""
    return moe_output(*moe_forward_parts(x, token_ids, w, config, policy, kernels), policy.stream_dtype)


def moe_output(routed: torch.Tensor, shared: torch.Tensor | None, stream_dtype: torch.dtype) -> torch.Tensor:
    """The block's output from `moe_forward_parts`: their sum rounded to the stream dtype."""
    return (routed if shared is None else routed + shared).to(stream_dtype)


def moe_forward_parts(
    x: torch.Tensor, token_ids: torch.Tensor, w: MoEWeights, config: ModelConfig, policy: NumericPolicy,
    kernels: KernelSet = REFERENCE_KERNELS, *, branches: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The routed experts' output and the shared expert's (None without one), before `moe_forward`
    adds them and rounds to the stream dtype: the model hands both to `hc_post(..., addend=shared)`,
    which does that add and rounding inside its own launch. `branches` (a decode step): the shared
    expert runs on a side lane beside the router and the routed experts (`decode_branches`),
    joined before returning."""
    qi, sd = policy.quantize_gemm_inputs, policy.stream_dtype
    shared = None
    if w.shared is not None:
        with side_streams.fork(x.device, SHARED, keep=(x,), on=branches):
            shared = kernels.expert_ffn(x, w.shared, limit=config.swiglu_limit, quantize_inputs=qi, hidden_dtype=sd)
    weights, expert_ids = kernels.route(
        x, w.gate, top_k=config.num_experts_per_tok, routed_scaling=config.routed_scaling_factor,
        bias=w.bias, tid2eid=w.tid2eid, token_ids=token_ids,
    )
    out = kernels.moe_experts(
        x, expert_ids, weights, w.experts, limit=config.swiglu_limit, quantize_inputs=qi, hidden_dtype=sd
    )
    side_streams.join(x.device, SHARED)
    return out, shared
