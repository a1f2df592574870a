"""The "short request behind a long prefill" scenario (field notes §7).

A long prompt of `long_len` tokens is sent, and `delay_s` later a short one of `short_len`
tokens. The scheduler serves running requests first, FIFO; each step has a budget of
`max_num_batched_tokens` tokens and gives one request at most `long_prefill_token_threshold`
of them. Run against two servers with the same budget (set to the long prompt's length):
* no cap (threshold = budget): the long prompt takes the whole budget of its step, so the
  short request's first token waits for the entire long prefill;
* with the cap (threshold C < budget): the long prompt takes C tokens per step and the short
  request's prompt fits beside it in the first step, so its TTFT is about one small step.
Each repetition reports both requests' TTFT; the summary takes medians. One unmeasured pair runs
first: on a GPU the first 2048-token prefill compiles kernels for new shapes (the H200 run of
2026-11-29 showed a cold repetition 10-25x slower than a warm one, which skewed a 2-rep median).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from mxserve.bench.serve.client import completion_body, import_httpx, stream_completion
from mxserve.bench.serve.stats import RequestRecord, percentile


@dataclass(frozen=True)
class PrefillCapResult:
    label: str  # "no cap" / "cap C"
    long_prefill_token_threshold: int
    max_num_batched_tokens: int
    long_prompt_len: int
    short_prompt_len: int
    short_ttft_s: list[float]  # per repetition
    long_ttft_s: list[float]
    errors: list[str]

    @property
    def short_ttft_median_s(self) -> float | None:
        return percentile(self.short_ttft_s, 50)

    @property
    def long_ttft_median_s(self) -> float | None:
        return percentile(self.long_ttft_s, 50)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["short_ttft_median_s"] = self.short_ttft_median_s
        out["long_ttft_median_s"] = self.long_ttft_median_s
        return out


async def run_prefill_cap(base_url: str, *, label: str, threshold: int, budget: int,
                          long_prompts: Sequence[Sequence[int]], short_prompts: Sequence[Sequence[int]],
                          model: str | None, headers: dict[str, str], timeout_s: float,
                          delay_s: float = 0.01) -> PrefillCapResult:
    """One repetition per (long, short) prompt pair, one after the other."""
    if len(long_prompts) != len(short_prompts) or not long_prompts:
        raise ValueError("need as many short prompts as long ones, at least one")
    httpx = import_httpx()
    short_ttft, long_ttft, errors = [], [], []
    async with httpx.AsyncClient(timeout=timeout_s) as client:

        async def pair(long_ids: Sequence[int], short_ids: Sequence[int]) -> tuple[RequestRecord, RequestRecord]:
            # The long request decodes a few tokens so it is still running when the short one arrives.
            long_task = asyncio.create_task(stream_completion(
                client, base_url, completion_body(long_ids, 4, model), headers=headers, timeout_s=timeout_s))
            await asyncio.sleep(delay_s)
            short = await stream_completion(client, base_url, completion_body(short_ids, 2, model), headers=headers,
                                            timeout_s=timeout_s)
            return short, await long_task

        warm_short, warm_long = await pair(long_prompts[0], short_prompts[0])  # unmeasured warm-up
        for name, record in (("warm-up short", warm_short), ("warm-up long", warm_long)):
            if not record.ok:
                errors.append(f"{name}: {record.error}")
        for long_ids, short_ids in zip(long_prompts, short_prompts, strict=True):
            short, long = await pair(long_ids, short_ids)
            for name, record, sink in (("short", short, short_ttft), ("long", long, long_ttft)):
                _collect(name, record, sink, errors)
    return PrefillCapResult(label, threshold, budget, len(long_prompts[0]), len(short_prompts[0]),
                            short_ttft, long_ttft, errors)


def _collect(name: str, record: RequestRecord, sink: list[float], errors: list[str]) -> None:
    if record.ok and record.ttft_s is not None:
        sink.append(record.ttft_s)
    else:
        errors.append(f"{name}: {record.error}")
