"""W8A8 INT8 linear: `linear_int8(x, weight, backend=)` with per-output-channel weight scales and
per-token activation scales (symmetric, round to nearest even, codes in [-127, 127]).

Backends: "reference" (torch: exact int64 dot, then two fp32 scale multiplies: the spec) and
"triton" (int8 tensor cores with int32 accumulation, exact, then the same multiplies): the two
agree bit for bit, and a row's result cannot depend on the batch (integer sums are exact).
DeepSeek-V4 checkpoints hold no INT8 layer; this op serves INT8-quantized deployments and
hardware whose fastest dot is the integer one (the field notes' 3.9x INT8 GEMV).
"""

from __future__ import annotations

import torch

from mxserve.kernels.linear_int8.reference import (
    Int8Weight,
    linear_int8_ref,
    quantize_activation_int8,
    quantize_weight_int8,
)

BACKENDS = ("reference", "triton")


def linear_int8(x: torch.Tensor, weight: Int8Weight, *, backend: str = "reference") -> torch.Tensor:
    """x [..., K] float → fp32 [..., N] (see `linear_int8_ref`)."""
    if backend == "reference":
        return linear_int8_ref(x, weight)
    if backend == "triton":
        from mxserve.kernels.linear_int8.triton import linear_int8_triton

        return linear_int8_triton(x, weight)
    raise ValueError(f"linear_int8: unknown backend {backend!r}; known: {list(BACKENDS)}")


__all__ = ["BACKENDS", "Int8Weight", "linear_int8", "linear_int8_ref", "quantize_activation_int8",
           "quantize_weight_int8"]
