"""Torch reference for the Lightning Indexer's scores (spec §3.4.4).

I[t, s] = Σ_h w[t, h] · ReLU(q[t, h] · k[s]) in fp32. Selection is a separate op
(`mxserve.kernels.topk`) with the project-wide tie-break (higher score, then lower index);
the score is exactly 0 whenever every head's dot product is negative, so ties are real.
"""

from __future__ import annotations

import torch


def indexer_scores_ref(q: torch.Tensor, head_weights: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """q [T, H, D], head_weights [T, H] (already scaled), keys [N, D] → scores [T, N] fp32."""
    # fp64 accumulation: a query's scores must not depend on how many queries share the call
    dots = torch.einsum("thd,nd->thn", q.double(), keys.double())
    return (torch.relu(dots) * head_weights.double()[:, :, None]).sum(dim=1).float()
