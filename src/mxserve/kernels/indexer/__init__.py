"""Lightning Indexer scoring. Backends: "reference" (torch)."""

from mxserve.kernels.indexer.reference import indexer_scores_ref

__all__ = ["indexer_scores_ref"]
