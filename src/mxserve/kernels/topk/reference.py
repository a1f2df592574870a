"""Tie-broken top-k, the torch reference (the spec every backend must match exactly).

The project-wide rule (spec §3.4.4, §12 item 12a): rank candidates by **higher score first,
then lower entry index**; candidates that are masked out (not causal, not existing) are never
selected; when fewer than k candidates are valid, the tail is padded with -1. Scores equal as
floats tie, so 0.0 and -0.0 tie (the indexer's ReLU-sum is exactly 0 whenever every head's
dot product is negative, which is why ties are common).

`torch.topk` breaks exact ties arbitrarily (and differently for different candidate counts),
so it cannot be used; this implements the rule explicitly with two stable sorts.
"""

from __future__ import annotations

import torch


def candidate_mask(
    scores: torch.Tensor, valid_mask: torch.Tensor | None = None, num_valid: torch.Tensor | None = None
) -> torch.Tensor:
    """bool [N, C]: valid_mask (if given) AND column < num_valid[row] (if given)."""
    n, c = scores.shape
    valid = torch.ones(n, c, dtype=torch.bool, device=scores.device)
    if valid_mask is not None:
        if tuple(valid_mask.shape) != (n, c) or valid_mask.dtype != torch.bool:
            raise ValueError(
                f"valid_mask must be bool [{n}, {c}], got {valid_mask.dtype} {tuple(valid_mask.shape)}"
            )
        valid &= valid_mask.to(scores.device)
    if num_valid is not None:
        num_valid = torch.as_tensor(num_valid, device=scores.device)
        if tuple(num_valid.shape) != (n,) or num_valid.dtype.is_floating_point:
            raise ValueError(
                f"num_valid must be an integer tensor [{n}], got {num_valid.dtype} {tuple(num_valid.shape)}"
            )
        valid &= torch.arange(c, device=scores.device)[None, :] < num_valid[:, None]
    return valid


def topk_tiebroken_ref(
    scores: torch.Tensor,
    k: int,
    valid_mask: torch.Tensor | None = None,
    num_valid: torch.Tensor | None = None,
) -> torch.Tensor:
    """Indices of the top-k valid candidates per row, ranked (score desc, index asc).

    scores: float [N, C] (fp32 in practice). k: >= 0, may exceed C.
    valid_mask: bool [N, C] or None. num_valid: int [N] or None (candidate j valid iff j < num_valid);
    both given -> AND. Returns int64 [N, k], best first, -1 padding after the valid ones.
    Raises ValueError for a NaN score on a valid candidate (a NaN has no rank), bad shapes, k < 0.
    """
    if scores.dim() != 2 or not scores.dtype.is_floating_point:
        raise ValueError(f"scores must be a float [N, C] tensor, got {scores.dtype} {tuple(scores.shape)}")
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k=}")
    n, c = scores.shape
    valid = candidate_mask(scores, valid_mask, num_valid)
    if bool(torch.isnan(scores).logical_and(valid).any()):
        raise ValueError("NaN score on a valid candidate")
    # Stable descending sort: equal scores keep ascending index order -> "lower index first".
    order = torch.sort(scores, dim=1, descending=True, stable=True).indices
    # Second stable sort by invalidity moves masked candidates behind every valid one while
    # keeping the (score, index) order among the valid ones (and NaNs of masked lanes harmless).
    invalid_in_order = (~valid).gather(1, order).to(torch.uint8)
    order = order.gather(1, torch.sort(invalid_in_order, dim=1, stable=True).indices)
    take = min(k, c)
    top = order[:, :take]
    top = torch.where(valid.gather(1, top), top, torch.full_like(top, -1))
    if take < k:
        top = torch.cat([top, torch.full((n, k - take), -1, dtype=torch.int64, device=scores.device)], dim=1)
    return top
