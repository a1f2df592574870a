"""Load: 64 concurrent streaming clients, 500 requests, every fifth client disconnecting after its
first chunk. Zero 5xx; every completed stream well formed (one finish, usage, [DONE]); all cache
pages free afterwards; /metrics deltas equal what the clients saw."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
from prometheus_client.parser import text_string_to_metric_families

from mxserve.engine.async_engine import AsyncEngine
from tests.server.conftest import wait_until_idle
from tests.server.live import API_KEY

NUM_CLIENTS = 64
NUM_REQUESTS = 500
DISCONNECT_EVERY = 5  # 20 %
MAX_TOKENS = 3
PROMPT = "In the beginning"  # BOS + 4 tokens
NUM_PROMPT_TOKENS = 5


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def _delta(before, after, name: str, **labels: str) -> float:
    key = (name, tuple(sorted(labels.items())))
    return after.get(key, 0.0) - before.get(key, 0.0)


async def _completer(client: httpx.AsyncClient) -> dict:
    body = {"prompt": PROMPT, "max_tokens": MAX_TOKENS, "stream": True, "ignore_eos": True, "temperature": 0.7,
            "stream_options": {"include_usage": True}}
    async with client.stream("POST", "/v1/completions", json=body) as response:
        lines = [line async for line in response.aiter_lines() if line]
        return {"status": response.status_code, "lines": lines}


async def _disconnector(client: httpx.AsyncClient) -> dict:
    body = {"prompt": PROMPT, "max_tokens": 64, "stream": True, "ignore_eos": True}
    async with client.stream("POST", "/v1/completions", json=body) as response:
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                break  # leaving the block closes the connection mid-stream
        return {"status": response.status_code, "lines": None}


def _check_stream(lines: list[str]) -> int:
    """Well formed: data events only, one id, one finish, usage chunk, then [DONE]. Returns tokens."""
    assert all(line.startswith("data: ") for line in lines), lines
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line[6:]) for line in lines[:-1]]
    assert len({c["id"] for c in chunks}) == 1
    finishes = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    assert [f for f in finishes if f] == ["length"] and finishes[-1] == "length"
    usage = chunks[-1]["usage"]
    assert chunks[-1]["choices"] == [] and usage["prompt_tokens"] == NUM_PROMPT_TOKENS
    return usage["completion_tokens"]


async def _run_load(base_url: str) -> list[dict]:
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(NUM_REQUESTS):
        queue.put_nowait(i)
    results: list[dict] = []
    limits = httpx.Limits(max_connections=NUM_CLIENTS, max_keepalive_connections=NUM_CLIENTS)
    async with httpx.AsyncClient(base_url=base_url, headers={"Authorization": f"Bearer {API_KEY}"}, limits=limits,
                                 timeout=httpx.Timeout(180.0)) as client:
        async def worker() -> None:
            while not queue.empty():
                i = queue.get_nowait()
                is_disconnect = i % DISCONNECT_EVERY == 0
                result = await (_disconnector(client) if is_disconnect else _completer(client))
                results.append({**result, "disconnect": is_disconnect})

        await asyncio.wait_for(asyncio.gather(*(worker() for _ in range(NUM_CLIENTS))), timeout=600)
    return results


def test_64_streaming_clients_500_requests_with_disconnects(live, client):
    before = _samples(client.get("/metrics").text)
    started = time.monotonic()
    results = asyncio.run(_run_load(live.base_url))
    elapsed = time.monotonic() - started
    wait_until_idle(live, timeout_s=60)
    after = _samples(client.get("/metrics").text)

    assert len(results) == NUM_REQUESTS
    assert all(r["status"] == 200 for r in results), sorted({r["status"] for r in results})
    completed = [r for r in results if not r["disconnect"]]
    tokens_seen = sum(_check_stream(r["lines"]) for r in completed)
    num_disconnects = NUM_REQUESTS - len(completed)
    assert num_disconnects == NUM_REQUESTS // DISCONNECT_EVERY and tokens_seen == len(completed) * MAX_TOKENS
    assert live.engine.stats.all_pages_free
    if isinstance(live.engine, AsyncEngine):  # the engine is in this process: ask its block manager too
        assert live.engine.engine.scheduler.block_manager.is_all_free()

    server_errors = [k for k, v in after.items() if k[0] == "mxserve_http_requests_total"
                     and dict(k[1])["status"].startswith("5") and v]
    assert not server_errors
    assert _delta(before, after, "mxserve_http_requests_total", path="/v1/completions", status="200") == NUM_REQUESTS
    assert _delta(before, after, "mxserve_requests_finished_total", finish_reason="length") == len(completed)
    assert _delta(before, after, "mxserve_requests_finished_total", finish_reason="abort") == num_disconnects
    assert _delta(before, after, "mxserve_prompt_tokens_total") == NUM_REQUESTS * NUM_PROMPT_TOKENS
    aborted_tokens = _delta(before, after, "mxserve_generation_tokens_total") - tokens_seen
    assert num_disconnects <= aborted_tokens < num_disconnects * 64  # each got >= 1 token, none finished
    assert _delta(before, after, "mxserve_time_to_first_token_seconds_count") == NUM_REQUESTS
    print(f"\nload: {NUM_REQUESTS} requests ({num_disconnects} disconnected) by {NUM_CLIENTS} clients in "
          f"{elapsed:.1f} s; {tokens_seen} tokens streamed to completed clients, {aborted_tokens:.0f} to aborted ones")
