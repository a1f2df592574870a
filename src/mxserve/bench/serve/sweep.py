"""Closed-loop clients at one concurrency level: N workers, each with one request in flight.

Each level sends `requests_per_client * N` requests; a worker sends its next request as soon as
its previous one finished, so the server sees exactly N streams at a time (after the ramp).
Prompts are taken in order from the prompt set, so the same seed gives the same requests.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from mxserve.bench.serve.client import completion_body, import_httpx, stream_completion
from mxserve.bench.serve.stats import LevelSummary, RequestRecord, summarize


async def run_level(base_url: str, *, dataset: str, concurrency: int, prompts: Sequence[Sequence[int]],
                    num_requests: int, output_len: int, model: str | None, headers: dict[str, str],
                    timeout_s: float) -> tuple[LevelSummary, list[RequestRecord]]:
    if concurrency <= 0 or num_requests <= 0:
        raise ValueError(f"need concurrency > 0 and num_requests > 0, got {concurrency=}, {num_requests=}")
    httpx = import_httpx()
    next_index = 0
    records: list[RequestRecord] = []

    async def worker(client) -> None:
        nonlocal next_index
        while next_index < num_requests:
            index = next_index
            next_index += 1  # one event loop: no other worker runs between the read and the write
            body = completion_body(prompts[index % len(prompts)], output_len, model)
            records.append(await stream_completion(client, base_url, body, headers=headers, timeout_s=timeout_s))

    limits = httpx.Limits(max_connections=concurrency + 4, max_keepalive_connections=concurrency + 4)
    async with httpx.AsyncClient(limits=limits, timeout=timeout_s) as client:
        start = time.perf_counter()
        await asyncio.gather(*(worker(client) for _ in range(min(concurrency, num_requests))))
        wall_s = time.perf_counter() - start
    return summarize(dataset, concurrency, records, wall_s), records
