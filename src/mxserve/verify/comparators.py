"""Comparators for logits and token streams, reporting what field-notes §6 asks for.

`compare_logits` gives, over a sequence of positions scored at the same context: mean and max
|Δ log p| in nats of the token the reference chose (teacher forcing), the number of argmax flips
and where the first one is, and max abs / max rel / cosine of the raw logits. A flip at a
near-tie (small `reference_margin_nats`) is not a bug; a flip at several nats is.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class LogitsComparison:
    num_positions: int
    mean_abs_logprob_delta_nats: float  # of the reference's argmax token, averaged over positions
    max_abs_logprob_delta_nats: float
    num_argmax_flips: int
    first_flip_position: int | None  # None: the argmax agrees everywhere
    first_flip_reference_margin_nats: float | None  # reference top-1 minus top-2 logprob there
    max_abs_logit_delta: float
    max_rel_logit_delta: float  # per position max|Δ| / max|reference|, worst position
    min_cosine: float

    def as_row(self) -> dict[str, float | int | None]:
        return dict(self.__dict__)


def compare_logits(candidate: torch.Tensor, reference: torch.Tensor) -> LogitsComparison:
    """candidate, reference: [P, V] logits at the same P contexts (any float dtype)."""
    if candidate.shape != reference.shape or candidate.dim() != 2:
        raise ValueError(f"compare_logits: shapes {tuple(candidate.shape)} and {tuple(reference.shape)} differ or are not [P, V]")
    cand, ref = candidate.double(), reference.double()
    cand_lp, ref_lp = cand.log_softmax(-1), ref.log_softmax(-1)
    ref_top = ref_lp.topk(2, dim=-1)
    chosen = ref_top.indices[:, 0]
    delta = (cand_lp.gather(1, chosen[:, None]) - ref_lp.gather(1, chosen[:, None])).abs().squeeze(1)
    flips = (cand.argmax(-1) != chosen).nonzero().flatten()
    first = int(flips[0]) if flips.numel() else None
    margin = float(ref_top.values[first, 0] - ref_top.values[first, 1]) if first is not None else None
    diff = (cand - ref).abs()
    rel = diff.amax(-1) / ref.abs().amax(-1).clamp_min(1e-30)
    cosine = torch.nn.functional.cosine_similarity(cand, ref, dim=-1)
    return LogitsComparison(
        num_positions=int(cand.shape[0]),
        mean_abs_logprob_delta_nats=float(delta.mean()) if delta.numel() else 0.0,
        max_abs_logprob_delta_nats=float(delta.max()) if delta.numel() else 0.0,
        num_argmax_flips=int(flips.numel()),
        first_flip_position=first,
        first_flip_reference_margin_nats=margin,
        max_abs_logit_delta=float(diff.max()) if diff.numel() else 0.0,
        max_rel_logit_delta=float(rel.max()) if rel.numel() else 0.0,
        min_cosine=float(cosine.min()) if cosine.numel() else 1.0,
    )


def first_divergence(tokens_a: list[int], tokens_b: list[int]) -> int | None:
    """Index of the first differing token (or of the end of the shorter stream); None if equal."""
    for i, (a, b) in enumerate(zip(tokens_a, tokens_b, strict=False)):
        if a != b:
            return i
    return None if len(tokens_a) == len(tokens_b) else min(len(tokens_a), len(tokens_b))
