"""Compressor pooling. Backends: "reference" (torch)."""

from mxserve.kernels.compressor.reference import compress_pool_ref

__all__ = ["compress_pool_ref"]
