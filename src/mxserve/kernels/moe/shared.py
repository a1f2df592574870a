"""The shared expert through the block-FP8 GEMM family: `expert_ffn_fp8`, the contract of `expert_ffn_ref`.

The three FP8 linears run on `linear_fp8_block` (its `backend`), the clamped SwiGLU and the
routing-weight / hidden-dtype rounding in torch between them, in the reference's order.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from mxserve.formats import QuantizedWeight, WeightLayout
from mxserve.kernels.linear import ResidentWeight
from mxserve.kernels.linear_fp8_block import linear_fp8_block
from mxserve.kernels.moe.reference import ExpertWeights


def _fp8(w: object) -> QuantizedWeight:
    if isinstance(w, ResidentWeight) and w.source is not None:
        w = w.source
    if not isinstance(w, QuantizedWeight) or w.layout is not WeightLayout.FP8_BLOCK:
        raise ValueError(f"shared expert: needs FP8 block weights, got {type(w).__name__}")
    return w


def expert_ffn_fp8(
    x: torch.Tensor, w: ExpertWeights, *, limit: float, quantize_inputs: bool, row_scale: torch.Tensor | None = None,
    hidden_dtype: torch.dtype = torch.float32, backend: str = "triton",
) -> torch.Tensor:
    """One SwiGLU expert on rows x [n, D] → fp32 [n, D] with FP8 block weights."""
    g = linear_fp8_block(x, _fp8(w.w1), quantize_input=quantize_inputs, backend=backend)
    u = linear_fp8_block(x, _fp8(w.w3), quantize_input=quantize_inputs, backend=backend)
    h = F.silu(g.clamp(max=limit)) * u.clamp(min=-limit, max=limit)
    if row_scale is not None:
        h = h * row_scale[:, None]
    return linear_fp8_block(h.to(hidden_dtype), _fp8(w.w2), quantize_input=quantize_inputs, backend=backend)
