"""Sparse attention with sink over cache slots. Backends: "reference" (torch)."""

from mxserve.kernels.sparse_attention.reference import SlotReader, sparse_attention_ref

__all__ = ["SlotReader", "sparse_attention_ref"]
