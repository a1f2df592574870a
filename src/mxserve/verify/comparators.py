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


@dataclass(frozen=True)
class TensorComparison:
    """Elementwise agreement of a candidate tensor with a reference of the same shape."""

    is_bit_equal: bool
    max_abs: float
    max_rel: float  # max|Δ| / max|reference| (a scale-free number for a whole tensor)
    cosine: float  # of the flattened tensors
    first_mismatch: tuple[int, ...] | None  # coordinates of the first element that differs at all
    first_mismatch_values: tuple[float, float] | None  # (candidate, reference) there
    num_non_finite: int  # in the candidate

    def describe(self) -> str:
        if self.is_bit_equal:
            return "bit-equal"
        where = f"first mismatch at {list(self.first_mismatch)} {self.first_mismatch_values}" if self.first_mismatch else ""
        nonfinite = f", {self.num_non_finite} non-finite" if self.num_non_finite else ""
        return f"max abs {self.max_abs:.3g}, max rel {self.max_rel:.3g}, cosine {self.cosine:.6f}{nonfinite}; {where}"


def compare_tensors(candidate: torch.Tensor, reference: torch.Tensor) -> TensorComparison:
    if candidate.shape != reference.shape:
        raise ValueError(f"compare_tensors: shapes {tuple(candidate.shape)} and {tuple(reference.shape)} differ")
    cand, ref = candidate.double(), reference.double()
    differs = ~((cand == ref) | (torch.isnan(cand) & torch.isnan(ref)))
    first = tuple(int(i) for i in differs.nonzero()[0]) if bool(differs.any()) else None
    diff = (cand - ref).abs()
    finite = torch.isfinite(diff)
    max_abs = float(diff.max()) if bool(finite.all()) and diff.numel() else (float("inf") if diff.numel() else 0.0)
    ref_scale = float(ref[torch.isfinite(ref)].abs().max()) if bool(torch.isfinite(ref).any()) else 0.0
    cos = torch.nn.functional.cosine_similarity(cand.flatten(), ref.flatten(), dim=0) if cand.numel() else None
    return TensorComparison(
        is_bit_equal=first is None,
        max_abs=max_abs,
        max_rel=max_abs / ref_scale if ref_scale > 0 else (0.0 if max_abs == 0 else float("inf")),
        cosine=float(cos) if cos is not None and bool(torch.isfinite(cos)) else (1.0 if cos is None else float("nan")),
        first_mismatch=first,
        first_mismatch_values=(float(cand[first]), float(ref[first])) if first is not None else None,
        num_non_finite=int((~torch.isfinite(cand)).sum()),
    )


@dataclass(frozen=True)
class LayerDivergence:
    per_layer: list[TensorComparison]
    first_divergent_layer: int | None  # first layer whose comparison breaks the thresholds
    min_cosine: float
    max_rel: float


def first_divergent_layer(candidate_layers: list[torch.Tensor], reference_layers: list[torch.Tensor], *,
                          min_cosine: float, max_rel: float) -> LayerDivergence:
    """Compare per-layer hidden states; a layer diverges when its cosine < min_cosine, its max rel
    > max_rel, or it holds non-finite values."""
    if len(candidate_layers) != len(reference_layers):
        raise ValueError(f"{len(candidate_layers)} candidate layers vs {len(reference_layers)} reference layers")
    rows = [compare_tensors(c, r) for c, r in zip(candidate_layers, reference_layers, strict=True)]
    first = next((i for i, c in enumerate(rows)
                  if c.num_non_finite or not c.cosine >= min_cosine or not c.max_rel <= max_rel), None)
    return LayerDivergence(rows, first, min((c.cosine for c in rows), default=1.0),
                           max((c.max_rel for c in rows), default=0.0))


def topk_overlap(candidate: torch.Tensor, reference: torch.Tensor, k: int) -> float:
    """Mean over positions of |top-k(candidate) ∩ top-k(reference)| / k, for [P, V] logits."""
    k = min(k, reference.shape[-1])
    cand_top = candidate.topk(k, dim=-1).indices
    ref_top = reference.topk(k, dim=-1).indices
    hits = (cand_top[:, :, None] == ref_top[:, None, :]).any(-1).sum(-1).double()
    return float((hits / k).mean()) if hits.numel() else 1.0
