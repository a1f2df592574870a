"""Sampler: one token per batch row from the model's logits, replayable per request (torch).

Contract: row r's token depends only on row r's logits, its `SamplingParams`, its seed and its
position, never on the other rows, the batch size or r itself. That is what lets a seeded request
be replayed alone and get the tokens it got in a busy batch (field notes §6; convention 12).
How that is kept:

* The random draw is one uniform u in [0, 1) per row, computed in Python from
  `mix_seed(seed, position)` (64-bit integer hashing, exact on every machine), not from a shared
  generator whose stream would be split among rows in batch order.
* Every tensor op is row-wise (division, softmax, stable sort, cumsum, searchsorted, argmax);
  none mixes rows, so a row's floating-point result does not depend on its neighbours.

Sampling a row (temperature >= 1e-5), in vLLM's order:
1. temperature: logits / T;
2. stable sort descending (ties: lowest token id first), softmax;
3. top-k: keep the k most likely (k = 0 or >= V: all);
4. top-p: on the top-k distribution renormalised, keep the smallest most-likely prefix whose mass
   reaches top_p (the most likely token is always kept);
5. min-p: keep tokens with probability >= min_p × the most likely token's (ratios are unchanged
   by renormalisation, so it does not matter which distribution step 5 reads);
6. inverse CDF: the first kept token whose cumulative mass (fp64) exceeds u × the kept mass.
Each filter keeps a prefix of the sorted order, so their intersection is a prefix too.

Greedy rows (temperature < 1e-5): argmax of the raw logits, lowest id on ties (torch.argmax
returns the first maximum); filters and seed are ignored.

Reported logprobs are of the raw distribution (`log_softmax(logits)`), vLLM's default.

Seeds: the engine passes one seed per row: `SamplingParams.seed` when set, else one drawn once per
request when it arrives (`sampling_params.request_seeds`, also the per-sample seeds of n > 1).
Positions: the index of the token being sampled in the request's sequence (prompt + outputs),
i.e. the chunk's `end_pos`; any value works if the engine computes it the same way on replay
(recompute after preemption gives the same position, hence the same draw).

Cost: greedy-only batches cost one argmax and one log_softmax. Sampled rows add a stable sort of
V values per row (vLLM pays the same for top-k/top-p); a sort-free path for unfiltered rows is a
later optimisation that must keep the contract above.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from mxserve.engine.logprobs import LogprobsTensors, compute_logprobs, gather_logprobs
from mxserve.engine.sampling_params import SamplingParams, mix_seed


@dataclass(frozen=True)
class SamplerOutput:
    """One sampled token per batch row, with its raw logprob."""

    token_ids: torch.Tensor  # [B] int64: the sampled token of each row
    logprobs: torch.Tensor  # [B] fp32: raw log_softmax(logits) of the sampled token
    # Rows' top-n when any row asked (`SamplingParams.logprobs` not None): [B, max n asked], with
    # each sampled token's rank; rows that asked for fewer are trimmed by `to_positions(num_top)`.
    top_logprobs: LogprobsTensors | None


def position_uniform(seed: int, position: int) -> float:
    """The draw for (seed, position): a float in [0, 1), a multiple of 2^-53 (exact in fp64)."""
    return (mix_seed(seed, position) >> 11) * 2.0**-53


class Sampler:
    """Stateless; one instance per model runner."""

    def sample(
        self,
        logits: torch.Tensor,
        params: Sequence[SamplingParams],
        seeds: Sequence[int],
        positions: Sequence[int],
        banned: Sequence[Sequence[int]] | None = None,
    ) -> SamplerOutput:
        """Sample one token per row.

        logits: [B, V] fp32, the model's last-position logits per request (-inf allowed for masked
            tokens, but each row needs one finite value).
        params / seeds / positions: B entries each; see the module docstring for seeds and positions.
        banned: optional, per row the token ids that must not be picked (min_tokens holds back EOS);
            they are masked for the choice only, reported logprobs stay those of the raw logits.
        Raises ValueError on shape, dtype or length mismatches and negative positions.
        """
        self._validate(logits, params, seeds, positions)
        raw_logprobs = compute_logprobs(logits)
        if banned is not None and any(banned):
            logits = logits.clone()
            for row, ids in enumerate(banned):
                if ids:
                    logits[row, torch.tensor(list(ids), dtype=torch.int64, device=logits.device)] = float("-inf")
        token_ids = torch.argmax(logits, dim=-1)  # greedy for every row; sampled rows overwritten below
        sampled_rows = [row for row, p in enumerate(params) if not p.is_greedy]
        if sampled_rows:
            rows = torch.tensor(sampled_rows, dtype=torch.int64, device=logits.device)
            sampled_ids = _sample_rows(
                logits.index_select(0, rows),
                [params[r] for r in sampled_rows],
                [position_uniform(seeds[r], positions[r]) for r in sampled_rows],
            )
            token_ids = token_ids.index_copy(0, rows, sampled_ids)
        selected = raw_logprobs.gather(1, token_ids[:, None])[:, 0]
        num_top = max((p.logprobs for p in params if p.logprobs is not None), default=None)
        top = None if num_top is None else gather_logprobs(raw_logprobs, token_ids, num_top)
        return SamplerOutput(token_ids=token_ids, logprobs=selected, top_logprobs=top)

    @staticmethod
    def _validate(
        logits: torch.Tensor, params: Sequence[SamplingParams], seeds: Sequence[int], positions: Sequence[int]
    ) -> None:
        if logits.dim() != 2 or logits.dtype != torch.float32:
            raise ValueError(f"logits must be [B, V] fp32, got {tuple(logits.shape)=} {logits.dtype=}")
        num_rows, vocab_size = logits.shape
        if vocab_size == 0:
            raise ValueError(f"logits have an empty vocabulary: {tuple(logits.shape)=}")
        if not len(params) == len(seeds) == len(positions) == num_rows:
            raise ValueError(
                f"one params/seed/position per row: {num_rows=}, {len(params)=}, {len(seeds)=}, {len(positions)=}"
            )
        for row, (p, seed, position) in enumerate(zip(params, seeds, positions, strict=True)):
            if not isinstance(p, SamplingParams):
                raise ValueError(f"params[{row}] must be SamplingParams, got {type(p).__name__}")
            if not isinstance(seed, int) or isinstance(seed, bool):
                raise ValueError(f"seeds[{row}] must be an int, got {seed!r}")
            if not isinstance(position, int) or isinstance(position, bool) or position < 0:
                raise ValueError(f"positions[{row}] must be an int >= 0, got {position!r}")


def _sample_rows(logits: torch.Tensor, params: Sequence[SamplingParams], uniforms: Sequence[float]) -> torch.Tensor:
    """Steps 1-6 of the module docstring for S non-greedy rows. logits: [S, V] fp32;
    uniforms: S floats in [0, 1). Returns [S] int64 token ids."""
    device = logits.device
    vocab_size = logits.shape[1]
    temperature = torch.tensor([p.temperature for p in params], dtype=torch.float32, device=device)
    # top_k 0 means off: keep all V.
    top_k = torch.tensor([p.top_k or vocab_size for p in params], dtype=torch.int64, device=device)
    top_p = torch.tensor([p.top_p for p in params], dtype=torch.float64, device=device)
    min_p = torch.tensor([p.min_p for p in params], dtype=torch.float32, device=device)
    u = torch.tensor(uniforms, dtype=torch.float64, device=device)

    scaled = logits / temperature[:, None]
    # Sorting the logits, not the probabilities: distinct logits can round to equal
    # probabilities, and the order should follow the model; stable, so ties go to the lowest id.
    sorted_logits, sorted_ids = torch.sort(scaled, dim=-1, descending=True, stable=True)
    probs = torch.softmax(sorted_logits, dim=-1)  # [S, V] fp32, non-increasing along each row

    ranks = torch.arange(vocab_size, device=device)
    keep = ranks[None, :] < top_k[:, None]
    # Masses in fp64: an fp32 cumsum over 129K tokens drifts by ~1e-4, enough to move the top-p
    # boundary and to bias the draw.
    mass = torch.where(keep, probs, 0).double()
    cumulative = mass.cumsum(dim=-1)
    mass_before = cumulative - mass  # exclusive prefix sum: mass of strictly more likely tokens
    in_nucleus = mass_before < top_p[:, None] * cumulative[:, -1:]
    # top_p = 1 is off, exactly: a rounded total below the true sum must not cut the tail.
    keep &= in_nucleus | (top_p[:, None] >= 1.0)
    keep &= probs >= min_p[:, None] * probs[:, :1]

    mass = torch.where(keep, mass, 0)
    cumulative = mass.cumsum(dim=-1)
    target = u[:, None] * cumulative[:, -1:]
    index = torch.searchsorted(cumulative, target, right=True)  # first rank with cumulative > target
    # u × total can round up to total itself; fall back to the last token with mass (kept tokens
    # with zero probability after underflow are never chosen: their cumulative does not grow).
    last_with_mass = (mass > 0).sum(dim=-1, keepdim=True) - 1
    index = torch.minimum(index, last_with_mass)
    return sorted_ids.gather(1, index)[:, 0]
