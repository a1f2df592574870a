"""Linear on full-precision or quantized weights. Backends: "reference" (torch)."""

from __future__ import annotations

import torch

from mxserve.kernels.linear.reference import (
    ResidentWeight,
    Weight,
    dequantized,
    grouped_linear_ref,
    is_quantized,
    linear_ref,
    weight_shape,
)

_BACKENDS = {"reference": linear_ref}


def linear(x: torch.Tensor, weight: Weight, *, quantize_input: bool = False, backend: str = "reference",
           out_dtype: torch.dtype | None = None) -> torch.Tensor:
    try:
        impl = _BACKENDS[backend]
    except KeyError:
        raise ValueError(f"linear: unknown backend {backend!r}; known: {sorted(_BACKENDS)}") from None
    return impl(x, weight, quantize_input=quantize_input, out_dtype=out_dtype)


__all__ = [
    "ResidentWeight",
    "Weight",
    "dequantized",
    "grouped_linear_ref",
    "is_quantized",
    "linear",
    "linear_ref",
    "weight_shape",
]
