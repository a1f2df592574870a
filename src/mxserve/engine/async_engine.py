"""AsyncEngine: the `LLMEngine` behind an asyncio front, for the HTTP server.

The engine loop runs in one background thread, so a model step (seconds on a CPU) never blocks
the event loop. That thread is the only one that touches the `LLMEngine`: the event loop sends it
commands (add, abort) through a thread-safe queue, and it sends each request's output snapshots
back into an `asyncio.Queue` with `loop.call_soon_threadsafe`. Between steps it also publishes an
`EngineStats` snapshot (running/waiting requests, cache usage) that other threads may read.

Contracts: `mxserve.engine.engine_client` (shared with `ProcessEngine`, the same loop in its own
process). Here, `shutdown(grace_s)` joins the thread, and `on_finished` runs on the engine thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, replace

from mxserve.engine.engine_client import (
    EngineDeadError,
    EngineStats,
    OutputListener,
    QueueFullError,
    stream_outputs,
)
from mxserve.engine.engine_info import EngineInfo
from mxserve.engine.llm_engine import LLMEngine
from mxserve.engine.outputs import RequestMetrics, RequestOutput, held_copy
from mxserve.engine.request import FinishReason
from mxserve.engine.sampling_params import SamplingParams

logger = logging.getLogger("mxserve.engine.async")

_IDLE_WAIT_S = 0.05  # how long the loop sleeps on an empty command queue when there is no work


@dataclass(frozen=True)
class _Add:
    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams


@dataclass(frozen=True)
class _Abort:
    request_id: str


@dataclass
class _Sink:
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue[RequestOutput]
    last: RequestOutput | None = None  # the latest snapshot sent (an abort reports its partial output)


class AsyncEngine:
    """Owns an `LLMEngine` and the thread that steps it."""

    def __init__(self, engine: LLMEngine, *, max_pending: int = 1024,
                 on_finished: OutputListener | None = None) -> None:
        """max_pending: most requests in the engine at once (beyond it `submit` raises QueueFullError).
        on_finished: called on the engine thread with each request's final output (metrics)."""
        self.engine = engine
        self.max_pending = max_pending
        self._on_finished = on_finished
        self._commands: queue.SimpleQueue[_Add | _Abort | None] = queue.SimpleQueue()
        self._sinks: dict[str, _Sink] = {}  # request id → where its outputs go (engine thread owns it)
        self._pending_ids: set[str] = set()  # guarded by _lock; read by submit() for the limit
        self._lock = threading.Lock()
        self._accepting = True
        self._stopping = threading.Event()
        self._dead_reason: str | None = None
        self._stats = self._read_stats()
        self._thread = threading.Thread(target=self._loop, name="mxserve-engine", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ event-loop side
    @property
    def info(self) -> EngineInfo:
        return self.engine.info

    @property
    def is_alive(self) -> bool:
        return self._thread.is_alive() and self._dead_reason is None

    @property
    def stats(self) -> EngineStats:
        """The snapshot taken after the latest loop turn, with a live `num_pending` (a request leaves
        it only after its pages are freed and its final output has gone to `on_finished`)."""
        return replace(self._stats, num_pending=self._pending_count())

    def check_prompt(self, prompt: str | Sequence[int]) -> list[int]:
        """Token ids of a completion prompt (text gets BOS); ValueError for an empty prompt, ids
        outside the vocabulary, or text on a checkpoint without a tokenizer. Length is the
        caller's check (it knows max_tokens)."""
        return self.engine.encode_prompt(prompt)[1]

    def submit(self, request_id: str, prompt_token_ids: list[int], params: SamplingParams,
               sink: asyncio.Queue[RequestOutput]) -> None:
        """Queue a request whose outputs go to `sink` (one queue may collect several requests)."""
        with self._lock:
            if not self._accepting or self._dead_reason is not None:
                raise EngineDeadError(self._dead_reason or "the server is shutting down")
            if len(self._pending_ids) >= self.max_pending:
                raise QueueFullError(f"{len(self._pending_ids)} requests are already queued or running "
                                     f"(limit {self.max_pending})")
            self._pending_ids.add(request_id)
        self._commands.put((_Add(request_id, list(prompt_token_ids), params), _Sink(asyncio.get_running_loop(), sink)))

    def abort(self, request_id: str) -> None:
        with self._lock:
            if request_id not in self._pending_ids:
                return
        self._commands.put(_Abort(request_id))

    def generate(self, request_id: str, prompt_token_ids: list[int],
                 params: SamplingParams) -> AsyncIterator[RequestOutput]:
        """`engine_client.stream_outputs`: this request's snapshots until the finished one."""
        return stream_outputs(self, request_id, prompt_token_ids, params)

    async def shutdown(self, grace_s: float = 10.0) -> None:
        """Stop accepting, let in-flight requests finish for up to grace_s, abort the rest, join."""
        with self._lock:
            self._accepting = False
        deadline = time.monotonic() + grace_s
        while self._pending_count() and time.monotonic() < deadline and self._thread.is_alive():
            await asyncio.sleep(0.05)
        self._stopping.set()
        self._commands.put(None)  # wake the loop
        await asyncio.to_thread(self._thread.join)

    def _pending_count(self) -> int:
        with self._lock:
            return len(self._pending_ids)

    # ------------------------------------------------------------------ engine-thread side
    def _loop(self) -> None:
        try:
            while not self._stopping.is_set():
                self._drain_commands(block=not self.engine.has_unfinished_requests())
                if self._stopping.is_set():
                    break
                if self.engine.has_unfinished_requests():
                    self._deliver(self.engine.step())
                self._stats = self._read_stats()
        except Exception as exc:  # a crashed step must not leave clients waiting forever
            logger.exception("engine loop failed; aborting every request")
            self._dead_reason = f"the engine loop failed: {type(exc).__name__}: {exc}"
        finally:
            self._abort_everything()
            self._stats = self._read_stats()

    def _drain_commands(self, *, block: bool) -> None:
        try:
            command = self._commands.get(timeout=_IDLE_WAIT_S) if block else self._commands.get_nowait()
        except queue.Empty:
            return
        while True:
            self._apply(command)
            try:
                command = self._commands.get_nowait()
            except queue.Empty:
                return

    def _apply(self, command) -> None:
        if command is None:
            return
        if isinstance(command, _Abort):
            sink = self._sinks.get(command.request_id)
            if sink is not None and self.engine.abort_request(command.request_id):
                self._finish_aborted(command.request_id, sink)
            return
        add, sink = command
        self._sinks[add.request_id] = sink
        try:
            self.engine.add_request(add.request_id, add.prompt_token_ids, add.params)
        except ValueError as exc:
            # The server validates before submitting, so this is a race or a bug; end the stream.
            logger.warning("request %s refused by the engine: %s", add.request_id, exc)
            self._finish_aborted(add.request_id, sink, prompt_token_ids=add.prompt_token_ids)

    def _deliver(self, outputs: list[RequestOutput]) -> None:
        for output in outputs:
            sink = self._sinks.get(output.request_id)
            if sink is None:
                continue
            # The engine keeps mutating its CompletionOutputs in later steps; hand over a copy.
            output = held_copy(output)
            sink.last = output
            if output.finished:
                self._release(output)
            _put(sink, output)

    def _release(self, output: RequestOutput) -> None:
        self._sinks.pop(output.request_id, None)
        if self._on_finished is not None:
            try:
                self._on_finished(output)
            except Exception:  # metrics must never take the engine down
                logger.exception("on_finished listener failed")
        with self._lock:
            self._pending_ids.discard(output.request_id)

    def _finish_aborted(self, request_id: str, sink: _Sink, *, prompt_token_ids: list[int] | None = None) -> None:
        """Tell the consumer its request ended without a natural finish (with what it had so far)."""
        output = sink.last or RequestOutput(request_id, None, prompt_token_ids or [], [], False,
                                            RequestMetrics(time.monotonic()))
        output = _mark_aborted(output)
        self._release(output)
        _put(sink, output)

    def _abort_everything(self) -> None:
        for request_id, sink in list(self._sinks.items()):
            self.engine.abort_request(request_id)
            self._finish_aborted(request_id, sink)
        with self._lock:
            self._pending_ids.clear()
        # Commands that arrived after the loop stopped still need their streams ended.
        while True:
            try:
                command = self._commands.get_nowait()
            except queue.Empty:
                return
            if isinstance(command, tuple):
                add, sink = command
                self._finish_aborted(add.request_id, sink, prompt_token_ids=add.prompt_token_ids)

    def _read_stats(self) -> EngineStats:
        with self._lock:
            num_pending = len(self._pending_ids)
        return replace(self.engine.stats(), num_pending=num_pending)


def _mark_aborted(output: RequestOutput) -> RequestOutput:
    outputs = [o if o.finish_reason else replace(o, finish_reason=FinishReason.ABORT.value) for o in output.outputs]
    return replace(output, outputs=outputs, finished=True)


def _put(sink: _Sink, output: RequestOutput) -> None:
    # RuntimeError: the consumer's event loop is closed, so nobody is listening any more.
    with contextlib.suppress(RuntimeError):
        sink.loop.call_soon_threadsafe(sink.queue.put_nowait, output)
