"""mxserve.kernels (see docs/architecture.md)."""

from mxserve.kernels.linear_fp8_block import linear_fp8_block

__all__ = ["linear_fp8_block"]
