"""What one streamed request measured, and the summary of a concurrency level (pure Python).

Definitions (the same as vLLM's `benchmark_serving`, so numbers compare):
* TTFT: request sent → first streamed chunk that carries output.
* ITL (inter-token latency): gaps between consecutive output chunks of one request. The server
  sends one chunk per engine step that gave the request new tokens, which is one token per
  step while decoding; a chunk that carried several tokens still counts as one gap.
* per-stream decode tok/s: (output tokens − 1) / (last chunk − first chunk) of one request.
* aggregate output tok/s: all output tokens of the level / the level's wall time (first
  request sent → last request done).
Failed requests count in `num_errors` and are left out of every latency statistic.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class RequestRecord:
    """One request as the client saw it. Times are seconds on the client's monotonic clock."""

    sent_s: float  # when the request was sent
    chunk_s: list[float] = field(default_factory=list)  # arrival of each chunk that carried output
    num_output_tokens: int = 0  # from the stream's usage chunk (0 when it never came)
    num_prompt_tokens: int = 0
    done_s: float | None = None  # when [DONE] arrived
    error: str | None = None  # None = success

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def ttft_s(self) -> float | None:
        return self.chunk_s[0] - self.sent_s if self.chunk_s else None

    @property
    def itl_s(self) -> list[float]:
        return [b - a for a, b in zip(self.chunk_s, self.chunk_s[1:], strict=False)]

    @property
    def decode_tok_s(self) -> float | None:
        """Output tokens after the first, over the time from the first chunk to the last."""
        if self.num_output_tokens < 2 or len(self.chunk_s) < 2:
            return None
        span = self.chunk_s[-1] - self.chunk_s[0]
        return (self.num_output_tokens - 1) / span if span > 0 else None


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolated q-th percentile (q in [0, 100]) of `values`; None for no values."""
    if not 0 <= q <= 100:
        raise ValueError(f"percentile q={q} is outside [0, 100]")
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    lo, hi = math.floor(rank), math.ceil(rank)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (rank - lo)


@dataclass(frozen=True)
class LevelSummary:
    dataset: str  # prompt set name ("random", "text")
    concurrency: int  # clients with one request in flight each
    num_requests: int
    num_errors: int
    first_errors: tuple[str, ...]  # up to 3 distinct error messages
    wall_s: float
    total_output_tokens: int  # successful requests only
    aggregate_output_tok_s: float
    per_stream_decode_tok_s_median: float | None
    ttft_p50_s: float | None
    ttft_p99_s: float | None
    itl_p50_s: float | None
    itl_p99_s: float | None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["first_errors"] = list(self.first_errors)
        return out


def summarize(dataset: str, concurrency: int, records: Sequence[RequestRecord], wall_s: float) -> LevelSummary:
    good = [r for r in records if r.ok]
    errors = [r.error for r in records if not r.ok]
    distinct = tuple(dict.fromkeys(e for e in errors if e))[:3]
    ttfts = [r.ttft_s for r in good if r.ttft_s is not None]
    itls = [gap for r in good for gap in r.itl_s]
    decode = [d for r in good if (d := r.decode_tok_s) is not None]
    total = sum(r.num_output_tokens for r in good)
    return LevelSummary(
        dataset=dataset, concurrency=concurrency, num_requests=len(records), num_errors=len(errors),
        first_errors=distinct, wall_s=wall_s, total_output_tokens=total,
        aggregate_output_tok_s=total / wall_s if wall_s > 0 else 0.0,
        per_stream_decode_tok_s_median=percentile(decode, 50),
        ttft_p50_s=percentile(ttfts, 50), ttft_p99_s=percentile(ttfts, 99),
        itl_p50_s=percentile(itls, 50), itl_p99_s=percentile(itls, 99),
    )
