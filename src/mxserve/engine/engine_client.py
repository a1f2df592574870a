"""The contract between the HTTP server and an engine front, whichever runs the engine loop.

Two fronts implement `EngineClient`: `AsyncEngine` (the `LLMEngine` loop in a thread of the server
process) and `ProcessEngine` (the loop in its own process, `mxserve serve --engine-process`). The
server only ever talks to this interface, so both give the same answers:

* `submit()` never raises for a bad prompt: callers validate first with `check_prompt()` (pure
  tokenizer work, safe on the event loop). It raises `QueueFullError` when `max_pending` requests
  are already in the engine, and `EngineDeadError` after shutdown or once the loop has died.
* Every submitted request ends with exactly one finished `RequestOutput` in its sink (finish
  reason "abort" when it is aborted, on shutdown, or when the engine loop fails).
* `abort()` is idempotent and safe for a request that already finished.
* `shutdown(grace_s)` stops new work, lets running requests finish for up to `grace_s`, aborts the
  rest, and stops the loop.
* `stats` is the snapshot published after the latest engine step, with a live `num_pending`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from mxserve.engine.engine_info import EngineInfo
from mxserve.engine.outputs import RequestOutput
from mxserve.engine.sampling_params import SamplingParams
from mxserve.engine.speculative.metrics import SpecDecodeStats


class QueueFullError(RuntimeError):
    """The engine already holds `max_pending` requests; try again later (HTTP 503)."""


class EngineDeadError(RuntimeError):
    """The engine loop has stopped (shutdown, a step raised, its process died); no more requests (HTTP 503)."""


class EngineStartError(RuntimeError):
    """The engine could not start (bad checkpoint, out of memory at load, its process died); the
    message names the cause. bad_input: the cause was a CheckpointError / ConfigError."""

    def __init__(self, message: str, *, bad_input: bool = False) -> None:
        super().__init__(message)
        self.bad_input = bad_input


@dataclass(frozen=True)
class EngineStats:
    num_running: int  # requests holding cache pages
    num_waiting: int  # requests queued in the scheduler
    num_pending: int  # requests submitted and not yet finished (running + waiting + in transit)
    cache_usage: float  # fraction of pages in use in the fullest pool, [0, 1]
    all_pages_free: bool  # no request holds any cache page
    spec_decode: SpecDecodeStats | None = None  # speculative decoding counters (a copy), None without it


OutputListener = Callable[[RequestOutput], None]


class EngineClient(Protocol):
    max_pending: int

    @property
    def info(self) -> EngineInfo: ...

    @property
    def is_alive(self) -> bool: ...

    @property
    def stats(self) -> EngineStats: ...

    def check_prompt(self, prompt: str | Sequence[int]) -> list[int]: ...

    def submit(self, request_id: str, prompt_token_ids: list[int], params: SamplingParams,
               sink: asyncio.Queue[RequestOutput]) -> None: ...

    def abort(self, request_id: str) -> None: ...

    def generate(self, request_id: str, prompt_token_ids: list[int],
                 params: SamplingParams) -> AsyncIterator[RequestOutput]: ...

    async def shutdown(self, grace_s: float = 10.0) -> None: ...


async def stream_outputs(client: EngineClient, request_id: str, prompt_token_ids: list[int],
                         params: SamplingParams) -> AsyncIterator[RequestOutput]:
    """Both fronts' `generate`: submit one request and yield its snapshots until the finished one.
    Closing the iterator early (a client disconnect cancels the consuming task) aborts the request."""
    sink: asyncio.Queue[RequestOutput] = asyncio.Queue()
    client.submit(request_id, prompt_token_ids, params, sink)
    finished = False
    try:
        while not finished:
            output = await sink.get()
            finished = output.finished
            yield output
    finally:
        if not finished:
            client.abort(request_id)
