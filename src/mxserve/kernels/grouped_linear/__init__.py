"""The block-diagonal grouped projection (the attention's wo_a, spec §3.4.6):
`grouped_linear(x [T, G, K], weight [G·R, K], backend=)` → fp32 [T, G, R].

Backends: "reference" (`grouped_linear_ref`: fp64 einsum on the dequantized weight, the spec)
and "triton" (FP8_BLOCK weights: every group in one launch of the block-scaled FP8 kernel, grid
axis 2 = group; weight-only, as the release runs wo_a without activation quantization).
"""

from __future__ import annotations

import torch

from mxserve.kernels.linear.reference import Weight, grouped_linear_ref

BACKENDS = ("reference", "triton")


def grouped_linear(x: torch.Tensor, weight: Weight, *, backend: str = "reference") -> torch.Tensor:
    if backend == "reference":
        return grouped_linear_ref(x, weight)
    if backend == "triton":
        from mxserve.kernels.linear_fp8_block.triton import grouped_linear_fp8_block_triton

        return grouped_linear_fp8_block_triton(x, weight)
    raise ValueError(f"grouped_linear: unknown backend {backend!r}; known: {list(BACKENDS)}")


__all__ = ["BACKENDS", "grouped_linear", "grouped_linear_ref"]
