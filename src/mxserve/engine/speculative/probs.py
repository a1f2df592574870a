"""The sampling distribution of a row as a full probability vector (for lossless verification).

Rejection sampling needs P(x) for the token the draft proposed, not just one sample, so this
module computes the distribution the `Sampler` draws from, with the same rules in the same
order (mxserve.engine.sampler, steps 1-5): temperature, stable descending sort, softmax, top-k,
top-p on the top-k mass, min-p relative to the most likely token; kept masses renormalised, in
fp64. Greedy rows (temperature < 1e-5) are one-hot at the argmax (lowest id on ties), so
verification against them accepts exactly the argmax. Draws from a vector use an inverse CDF in
vocabulary order with a caller-given uniform (position-keyed, replayable).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from mxserve.engine.sampling_params import SamplingParams, mix_seed


def processed_probs(logits: torch.Tensor, params: Sequence[SamplingParams]) -> torch.Tensor:
    """logits [N, V] fp32 → probabilities [N, V] fp64 of what the sampler would draw per row."""
    if logits.dim() != 2 or len(params) != logits.shape[0]:
        raise ValueError(f"processed_probs: logits {tuple(logits.shape)} with {len(params)} params")
    num_rows, vocab_size = logits.shape
    out = torch.zeros(num_rows, vocab_size, dtype=torch.float64, device=logits.device)
    for row, p in enumerate(params):
        if p.is_greedy:
            out[row, int(torch.argmax(logits[row]))] = 1.0
            continue
        scaled = logits[row] / p.temperature
        sorted_logits, sorted_ids = torch.sort(scaled, descending=True, stable=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        keep = torch.arange(vocab_size, device=logits.device) < (p.top_k or vocab_size)
        mass = torch.where(keep, probs, 0).double()
        cumulative = mass.cumsum(0)
        if p.top_p < 1.0:
            keep &= (cumulative - mass) < p.top_p * cumulative[-1]
        keep &= probs >= p.min_p * probs[0]
        mass = torch.where(keep, mass, 0)
        out[row, sorted_ids] = mass / mass.sum()
    return out


def sample_from(probs: torch.Tensor, uniform: float) -> int:
    """Inverse CDF over a [V] non-negative vector (any scale) with u in [0, 1); only tokens with
    mass can be returned."""
    cumulative = probs.double().cumsum(0)
    total = float(cumulative[-1])
    if not total > 0:
        raise ValueError("sample_from: the distribution has no mass")
    index = int(torch.searchsorted(cumulative, torch.tensor([uniform * total], dtype=torch.float64,
                                                            device=probs.device), right=True)[0])
    last_with_mass = int((probs > 0).nonzero()[-1])
    return min(index, last_with_mass)


def keyed_uniform(seed: int, position: int, purpose: int) -> float:
    """A draw in [0, 1) for (seed, position, purpose); purposes keep the speculative draws
    (draft sampling, acceptance tests, the final token) independent of each other and of the
    plain sampler's `position_uniform(seed, position)`."""
    return (mix_seed(mix_seed(seed, position), 1000 + purpose) >> 11) * 2.0**-53
