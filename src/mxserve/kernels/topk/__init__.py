"""Tie-broken top-k: the indexer's selection op (rule: higher score first, then lower index).

`topk_tiebroken(scores, k, valid_mask=..., num_valid=..., backend="reference")` is the public
entry; `reference.py` is the spec. The Triton launchers in `triton.py` keep the same contract and
return identical indices; the attention chooser installs them: for rows of up to 16384
candidates the rank path (session 7: a bound kernel that compacts S, then rank counting over many
programs a row) for at most 8 rows with k >= 512, else the radix-select kernel (MXSERVE_TOPK_KERNEL
= auto, the default; rank / select force one), and the legacy one-program kernel for longer rows or
with MXSERVE_TOPK_LEGACY=1 / MXSERVE_TOPK_KERNEL=legacy.
"""

from __future__ import annotations

import torch

from mxserve.kernels.topk.reference import candidate_mask, topk_tiebroken_ref

BACKENDS = ("reference",)


def topk_tiebroken(
    scores: torch.Tensor,
    k: int,
    *,
    valid_mask: torch.Tensor | None = None,
    num_valid: torch.Tensor | None = None,
    backend: str = "reference",
) -> torch.Tensor:
    """int64 [N, k]: per row the top-k valid candidates, best first, -1 padded.

    See `topk_tiebroken_ref` for the full contract. Raises ValueError for an unknown backend.
    """
    if backend == "reference":
        return topk_tiebroken_ref(scores, k, valid_mask, num_valid)
    raise ValueError(f"unknown top-k backend {backend!r}; available: {BACKENDS}")


__all__ = ["BACKENDS", "candidate_mask", "topk_tiebroken", "topk_tiebroken_ref"]
