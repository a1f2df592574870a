"""One streamed `/v1/completions` request, timed chunk by chunk (httpx, asyncio).

httpx is the benchmark's one extra dependency (`pip install mxserve[bench]`; the test extra has
it too): an async client that streams server-sent events line by line. It is imported here and
only here, lazily, with an error that says how to install it.

Every request asks for exactly `max_tokens` tokens (`ignore_eos`, greedy) and for a usage
chunk, so token counts come from the server, not from splitting text.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from mxserve.bench.serve.stats import RequestRecord


def import_httpx() -> Any:
    try:
        import httpx
    except ImportError:
        raise RuntimeError("mxserve bench serve needs httpx: pip install 'mxserve[bench]' (or httpx)") from None
    return httpx


def completion_body(prompt_ids: Sequence[int], max_tokens: int, model: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "prompt": list(prompt_ids), "max_tokens": max_tokens, "temperature": 0.0, "ignore_eos": True,
        "stream": True, "stream_options": {"include_usage": True},
    }
    if model is not None:
        body["model"] = model
    return body


async def stream_completion(client: Any, base_url: str, body: dict[str, Any], *, headers: dict[str, str],
                            timeout_s: float) -> RequestRecord:
    """Send one streaming completion; never raises for a failed request (the record says why)."""
    record = RequestRecord(sent_s=time.perf_counter())
    try:
        async with client.stream("POST", base_url + "/v1/completions", json=body, headers=headers,
                                 timeout=timeout_s) as response:
            if response.status_code != 200:
                text = (await response.aread()).decode(errors="replace")
                record.error = f"HTTP {response.status_code}: {' '.join(text.split())[:200]}"
                return record
            async for line in response.aiter_lines():
                if not line.startswith("data: "):
                    continue
                data = line[len("data: "):]
                if data == "[DONE]":
                    record.done_s = time.perf_counter()
                    break
                _take_chunk(record, json.loads(data), time.perf_counter())
    except Exception as exc:  # a benchmark counts failures; it does not stop at the first one
        record.error = f"{type(exc).__name__}: {exc}"[:200]
        return record
    if record.done_s is None:
        record.error = "stream ended without [DONE]"
    elif record.num_output_tokens != body["max_tokens"]:
        record.error = f"got {record.num_output_tokens} output tokens, asked for {body['max_tokens']}"
    return record


def _take_chunk(record: RequestRecord, payload: dict[str, Any], now_s: float) -> None:
    if "error" in payload:
        record.error = f"error chunk: {json.dumps(payload['error'])[:200]}"
        return
    usage = payload.get("usage")
    if usage:
        record.num_output_tokens = int(usage.get("completion_tokens", 0))
        record.num_prompt_tokens = int(usage.get("prompt_tokens", 0))
    for choice in payload.get("choices") or ():
        # A chunk carries output unless it only announces the finish (no text, finish_reason set).
        if choice.get("text") or choice.get("finish_reason") is None:
            record.chunk_s.append(now_s)
            return
