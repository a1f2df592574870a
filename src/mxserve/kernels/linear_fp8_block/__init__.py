"""Block-scaled FP8 linear (the release's dense layers): `linear_fp8_block(x, weight, backend=)`.

Backends: "reference" (torch, fp64 accumulation: the spec) and "triton" (GEMV for decode,
tiled GEMM for prefill; FP8 codes widened in registers, block scales folded per 128-K block;
see `triton.py`). Triton is an optional dependency, imported only when that backend is used.
Which backend a layer uses in the engine is decided once at load by `mxserve.kernels.chooser`.
"""

from __future__ import annotations

import torch

from mxserve.formats import QuantizedWeight
from mxserve.kernels.linear_fp8_block.reference import (
    check_fp8_block_weight,
    linear_fp8_block_ref,
    quantize_activation_fp8_block,
)

BACKENDS = ("reference", "triton")


def linear_fp8_block(
    x: torch.Tensor, weight: QuantizedWeight, *, quantize_input: bool = False, backend: str = "reference",
    out_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """x [..., K] · W[N, K]ᵀ → fp32 [..., N] for an FP8_BLOCK weight with 128x128 UE8M0 scales.

    `quantize_input` runs W8A8 (activations fake-quantized to e4m3fn per token per 128 channels).
    `out_dtype` (None: fp32; bf16/fp16): the fp32 result rounded to nearest even, bit for bit
    `.to(out_dtype)` of the fp32 result (the Triton launch rounds in its final store).
    """
    if backend == "reference":
        return linear_fp8_block_ref(x, weight, quantize_input=quantize_input, out_dtype=out_dtype)
    if backend == "triton":
        from mxserve.kernels.linear_fp8_block.triton import linear_fp8_block_triton

        return linear_fp8_block_triton(x, weight, quantize_input=quantize_input, out_dtype=out_dtype)
    raise ValueError(f"linear_fp8_block: unknown backend {backend!r}; known: {list(BACKENDS)}")


__all__ = [
    "BACKENDS",
    "check_fp8_block_weight",
    "linear_fp8_block",
    "linear_fp8_block_ref",
    "quantize_activation_fp8_block",
]
