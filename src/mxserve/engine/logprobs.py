"""Logprobs: the log-probabilities reported with output tokens and prompt tokens (torch).

Semantics (vLLM / OpenAI): every reported value is a natural-log probability of the *raw* model
distribution, `log_softmax(logits)` in fp32, before temperature and top-k/top-p/min-p; so the
numbers describe the model, not the sampling settings. For each position we report the token
that is actually there (the sampled token, or the next prompt token), its logprob, its rank, and
the `num_top` most likely tokens.

Rank is 1-based and equals the token's place in a stable descending sort of the row (ties broken
by lowest token id), so whenever the token is among the top-n, `top[rank - 1]` is that token.

Prompt logprobs: the logits at position i predict the token at position i + 1, so prompt token 0
has no logprob (`None`, as OpenAI's `echo` reports `null`), and the logits at the last prompt
position (which predict the first output token) are not used.

Two forms: `LogprobsTensors` (batched, on the device, what the sampler returns) and
`PositionLogprobs` (plain Python per position, what engine outputs and the OpenAI server
serialise; `dataclasses.asdict` works on it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from mxserve.engine.sampling_params import MAX_NUM_LOGPROBS


@dataclass(frozen=True)
class TokenLogprob:
    """One candidate token at one position."""

    token_id: int  # vocabulary id
    logprob: float  # natural log of its raw model probability
    rank: int  # 1-based place in the stable descending order of the row


@dataclass(frozen=True)
class PositionLogprobs:
    """What is reported for one position (an output token or a prompt token)."""

    token_id: int  # the token actually at this position (sampled, or the real prompt token)
    logprob: float  # its natural-log raw model probability
    rank: int  # its 1-based rank among all vocabulary tokens
    top: tuple[TokenLogprob, ...]  # the requested top-n, most likely first (empty when n = 0)


@dataclass(frozen=True)
class LogprobsTensors:
    """Batched logprobs of N positions, as computed on the device."""

    token_ids: torch.Tensor  # [N] int64: the token at each position
    logprobs: torch.Tensor  # [N] fp32: its raw logprob
    ranks: torch.Tensor  # [N] int64: its 1-based rank
    top_token_ids: torch.Tensor  # [N, num_top] int64: most likely tokens, most likely first
    top_logprobs: torch.Tensor  # [N, num_top] fp32: their logprobs

    @property
    def num_top(self) -> int:
        return self.top_token_ids.shape[1]

    def to_positions(self, num_top: Sequence[int] | None = None) -> list[PositionLogprobs]:
        """Plain-Python records, one per row; `num_top[i]` (<= self.num_top) trims row i's top
        list to what its request asked for. One device-to-host copy per tensor."""
        num_rows = self.token_ids.shape[0]
        if num_top is not None and len(num_top) != num_rows:
            raise ValueError(f"num_top has {len(num_top)} entries for {num_rows} rows")
        token_ids = self.token_ids.tolist()
        logprobs = self.logprobs.tolist()
        ranks = self.ranks.tolist()
        top_ids = self.top_token_ids.tolist()
        top_lps = self.top_logprobs.tolist()
        records = []
        for row in range(num_rows):
            count = self.num_top if num_top is None else num_top[row]
            if not 0 <= count <= self.num_top:
                raise ValueError(f"row {row}: num_top {count} outside [0, {self.num_top}]")
            top = tuple(
                TokenLogprob(token_id=top_ids[row][j], logprob=top_lps[row][j], rank=j + 1) for j in range(count)
            )
            records.append(PositionLogprobs(token_ids[row], logprobs[row], ranks[row], top))
        return records


def compute_logprobs(logits: torch.Tensor) -> torch.Tensor:
    """Raw logprobs: `log_softmax` over the vocabulary in fp32. [N, V] any float → [N, V] fp32."""
    return torch.log_softmax(logits.float(), dim=-1)


def gather_logprobs(logprobs: torch.Tensor, token_ids: torch.Tensor, num_top: int) -> LogprobsTensors:
    """The logprob and rank of `token_ids[i]` in row i, and the row's `num_top` best tokens.

    logprobs: [N, V] fp32 (from `compute_logprobs`). token_ids: [N] int64 on the same device.
    num_top: 0..MAX_NUM_LOGPROBS. Raises ValueError on shape, dtype or range errors.

    The top-n comes from a stable full sort, not `torch.topk`, because topk's order among equal
    values is unspecified and reported logprobs must be replayable; the cost is O(V log V) per
    row, paid only in steps where some request asked for logprobs.
    """
    if logprobs.dim() != 2 or logprobs.dtype != torch.float32:
        raise ValueError(f"logprobs must be [N, V] fp32, got {tuple(logprobs.shape)=} {logprobs.dtype=}")
    if token_ids.shape != (logprobs.shape[0],) or token_ids.dtype != torch.int64:
        raise ValueError(f"token_ids must be [N] int64 with N={logprobs.shape[0]}, got "
                         f"{tuple(token_ids.shape)=} {token_ids.dtype=}")
    if not 0 <= num_top <= MAX_NUM_LOGPROBS:
        raise ValueError(f"num_top must be in [0, {MAX_NUM_LOGPROBS}], got {num_top}")
    num_rows, vocab_size = logprobs.shape
    if num_rows:
        low, high = int(token_ids.min()), int(token_ids.max())
        if low < 0 or high >= vocab_size:
            raise ValueError(f"token_ids outside [0, {vocab_size}): min {low}, max {high}")
    selected = logprobs.gather(1, token_ids[:, None])  # [N, 1]
    # Stable-sort rank: tokens strictly more likely, plus equally likely tokens with lower ids.
    vocab_ids = torch.arange(vocab_size, device=logprobs.device)
    is_before = (logprobs > selected) | ((logprobs == selected) & (vocab_ids[None, :] < token_ids[:, None]))
    ranks = is_before.sum(dim=1) + 1
    if num_top > 0:
        sorted_lps, sorted_ids = torch.sort(logprobs, dim=1, descending=True, stable=True)
        top_logprobs, top_token_ids = sorted_lps[:, :num_top], sorted_ids[:, :num_top]
    else:
        top_logprobs = logprobs.new_empty((num_rows, 0))
        top_token_ids = token_ids.new_empty((num_rows, 0))
    return LogprobsTensors(token_ids, selected[:, 0], ranks, top_token_ids, top_logprobs)


def prompt_logprobs(
    logits: torch.Tensor, prompt_token_ids: Sequence[int] | torch.Tensor, num_top: int
) -> list[PositionLogprobs | None]:
    """Logprobs of a whole prompt, one entry per prompt position; entry 0 is None.

    logits: [T, V] (any float dtype) for prompt positions 0..T-1, where row i predicts token i+1.
    prompt_token_ids: T ids. Entry i >= 1 is the logprob and rank of prompt token i under
    row i - 1, with that row's top `num_top`. A chunked prefill calls `gather_logprobs` on each
    chunk's rows with the next tokens as targets instead; the results are the same.
    """
    ids = torch.as_tensor(prompt_token_ids, dtype=torch.int64, device=logits.device)
    if logits.dim() != 2 or ids.shape != (logits.shape[0],):
        raise ValueError(f"logits must be [T, V] with T = len(prompt_token_ids); got "
                         f"{tuple(logits.shape)=} for {ids.shape[0]} prompt tokens")
    if ids.shape[0] == 0:
        return []
    # Row i - 1 predicts token i: drop the last row (it predicts the first output token).
    gathered = gather_logprobs(compute_logprobs(logits[:-1]), ids[1:], num_top)
    return [None, *gathered.to_positions()]
