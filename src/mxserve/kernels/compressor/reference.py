"""Torch reference for the compressor's pooling step (spec §3.4.3).

Each compressed entry pools R state rows per channel: ĉ[k] = Σ_r softmax_r(z_r[k]) · a_r[k]
in fp32, independently per channel. Absent rows (positions before 0) carry logit −inf and
value 0, so they get weight 0. CSA (overlap) entries see R = 2m rows: the previous window's
A halves then the current window's B halves; HCA entries see the m rows of their window.
"""

from __future__ import annotations

import torch


def compress_pool_ref(values: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """values, logits [E, R, d] fp32 (absent rows: value 0, logit −inf) → pooled [E, d] fp32."""
    if values.shape != logits.shape:
        raise ValueError(f"compress_pool: {values.shape=} != {logits.shape=}")
    if values.shape[0] == 0:
        return values.new_zeros((0, values.shape[-1]), dtype=torch.float32)
    weights = torch.softmax(logits.double(), dim=1)  # fp64, rounded once: independent of how many entries
    return (weights * values.double()).sum(dim=1).float()
