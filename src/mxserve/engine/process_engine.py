"""ProcessEngine: the `LLMEngine` loop in its own process, behind the same front as `AsyncEngine`.

Why: in one process the engine loop (scheduler, detokenizer, building outputs) and the HTTP event
loop (socket writes, SSE JSON) share one GIL, so under load the server runs at one core's worth of
Python (docs/benchmarks.md, sessions 12 and 14). Here the engine process (`engine_core`) owns the
engine; this front only validates prompts, forwards commands and turns the engine's per-step
deltas back into the `RequestOutput` snapshots the server consumes.

Threads: none of its own. The output pipe is watched by the event loop of the first `submit`
(`loop.add_reader`), so a step's batch is read, assembled and put into the requests' queues on
that loop with no hand-over between threads; several batches waiting at once are read together
and each request gets one snapshot for all of them. Call `submit` / `abort` / `generate` /
`shutdown` from that loop. When that loop has closed (tests that run one `asyncio.run` each), the
next `submit` binds the front to its own loop.

Contracts: `mxserve.engine.engine_client`, as `AsyncEngine`; `on_finished` runs on the event loop.
Failures: an engine that cannot start raises `EngineStartError` from the constructor with the
cause (the engine process's exception, or how it died: a signal such as SIGKILL from the OOM
killer); an engine process that dies or whose step raises while serving ends every open request
with "abort", `is_alive` turns false and `submit` raises `EngineDeadError`. The engine process is
never left running: `shutdown` stops it (SIGKILL if it does not exit), an exit handler covers a
server that never shut down, and the engine process stops by itself when this process dies.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import multiprocessing
import signal
import threading
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, replace

from mxserve.config.engine_config import EngineConfig
from mxserve.engine.core_messages import (
    AbortRequest,
    AddRequest,
    Command,
    CoreFailed,
    CoreReady,
    ShutdownCore,
    StepBatch,
)
from mxserve.engine.engine_client import (
    EngineDeadError,
    EngineStartError,
    EngineStats,
    OutputListener,
    QueueFullError,
    stream_outputs,
)
from mxserve.engine.engine_core import CoreSpec, EngineSetup, run_engine_core
from mxserve.engine.engine_info import EngineInfo
from mxserve.engine.output_deltas import RequestAssembly
from mxserve.engine.outputs import RequestOutput
from mxserve.engine.sampling_params import SamplingParams

logger = logging.getLogger("mxserve.engine.process")

_STARTUP_POLL_S = 0.2  # how often start-up checks that the engine process is still alive
_STARTUP_TIMEOUT_S = 1800.0  # a 160 GB checkpoint loads slowly; a dead engine process is noticed at once
_EXIT_WAIT_S = 30.0  # after ShutdownCore: how long the engine process gets to exit before SIGKILL
_MAX_BATCHES_PER_READ = 64  # batches read in one event-loop callback before yielding to other work


@dataclass
class _Pending:
    assembly: RequestAssembly
    sink: asyncio.Queue[RequestOutput]


class ProcessEngine:
    """Starts the engine process and fronts it; the constructor returns once the engine is ready."""

    def __init__(self, engine_config: EngineConfig, *, max_pending: int = 1024,
                 on_finished: OutputListener | None = None, capture_graphs: bool = True, progress: bool = False,
                 engine_setup: EngineSetup | None = None, startup_timeout_s: float = _STARTUP_TIMEOUT_S) -> None:
        """max_pending, on_finished: as `AsyncEngine`. capture_graphs: capture every CUDA-graph bucket
        in the engine process before it reports ready. engine_setup: test/benchmark hook run on the
        loaded engine in the engine process (a picklable callable). Raises EngineStartError."""
        self.max_pending = max_pending
        self._on_finished = on_finished
        self._requests: dict[str, _Pending] = {}  # submitted and not yet finished
        self._accepting = True
        self._dead_reason: str | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop watching the output pipe
        self._send_lock = threading.Lock()  # Connection.send is not safe from two threads at once
        root = logging.getLogger()
        log_format = next((h.formatter._fmt for h in root.handlers if h.formatter and h.formatter._fmt), "%(message)s")
        spec = CoreSpec(engine_config, capture_graphs, progress, root.getEffectiveLevel(), log_format, engine_setup)
        context = multiprocessing.get_context("spawn")  # CUDA cannot be forked
        commands_out, commands_in = context.Pipe(duplex=False)
        outputs_out, outputs_in = context.Pipe(duplex=False)
        # Not a daemon: the engine process may start its own rank processes (tensor parallelism).
        self._process = context.Process(target=run_engine_core, args=(spec, commands_out, outputs_in),
                                        name="mxserve-engine-core", daemon=False)
        self._process.start()
        commands_out.close()  # only the engine process holds these ends, so its death reads as EOF here
        outputs_in.close()
        self._commands, self._outputs = commands_in, outputs_out
        atexit.register(self._kill)
        try:
            ready = self._wait_until_ready(startup_timeout_s)
        except BaseException:
            self._kill()
            raise
        self.info: EngineInfo = ready.info
        self._stats: EngineStats = ready.stats
        logger.info("engine process %d ready", self._process.pid)

    @property
    def pid(self) -> int | None:
        return self._process.pid

    # ------------------------------------------------------------------ start-up
    def _wait_until_ready(self, timeout_s: float) -> CoreReady:
        deadline = time.monotonic() + timeout_s
        while not self._outputs.poll(_STARTUP_POLL_S):
            if not self._process.is_alive() and not self._outputs.poll():
                raise EngineStartError(f"the engine process exited while loading ({_describe_exit(self._process)}) "
                                       "before saying why; its log above may")
            if time.monotonic() > deadline:
                raise EngineStartError(f"the engine process did not become ready within {timeout_s:.0f} s")
        try:
            message = self._outputs.recv()
        except EOFError:
            self._process.join(5)
            raise EngineStartError(f"the engine process exited while loading ({_describe_exit(self._process)})") from None
        if isinstance(message, CoreFailed):
            logger.debug("engine process traceback:\n%s", message.traceback)
            raise EngineStartError(f"the engine failed to start: {message.error}", bad_input=message.bad_input)
        if not isinstance(message, CoreReady):
            raise EngineStartError(f"the engine process answered the start with {type(message).__name__}")
        return message

    # ------------------------------------------------------------------ the server's side
    @property
    def is_alive(self) -> bool:
        self._read_if_unwatched()
        return self._dead_reason is None and self._process.is_alive()

    @property
    def stats(self) -> EngineStats:
        """The engine process's stats after its latest loop turn, with a live `num_pending` (a
        request leaves it once its final output has gone to its sink and `on_finished`)."""
        self._read_if_unwatched()
        return replace(self._stats, num_pending=len(self._requests))

    def check_prompt(self, prompt: str | Sequence[int]) -> list[int]:
        """Token ids of a completion prompt (text gets BOS); ValueError as `LLMEngine.encode_prompt`."""
        return self.info.encode_prompt(prompt)[1]

    def submit(self, request_id: str, prompt_token_ids: list[int], params: SamplingParams,
               sink: asyncio.Queue[RequestOutput]) -> None:
        """Queue a request whose outputs go to `sink`; call it on the event loop that reads them."""
        if not self._accepting:
            raise EngineDeadError("the server is shutting down")
        if not self.is_alive:
            raise EngineDeadError(self._death_reason())
        if len(self._requests) >= self.max_pending:
            raise QueueFullError(f"{len(self._requests)} requests are already queued or running "
                                 f"(limit {self.max_pending})")
        if request_id in self._requests:
            raise ValueError(f"request id {request_id!r} is already in use")
        self._bind(asyncio.get_running_loop())
        ids = list(prompt_token_ids)
        self._requests[request_id] = _Pending(RequestAssembly(request_id, ids, time.monotonic()), sink)
        try:
            self._send(AddRequest(request_id, ids, params))
        except OSError:
            del self._requests[request_id]
            raise EngineDeadError(self._death_reason()) from None

    def abort(self, request_id: str) -> None:
        if request_id in self._requests:
            with contextlib.suppress(OSError):  # a dead engine process ends every request anyway
                self._send(AbortRequest(request_id))

    def generate(self, request_id: str, prompt_token_ids: list[int],
                 params: SamplingParams) -> AsyncIterator[RequestOutput]:
        """`engine_client.stream_outputs`: this request's snapshots until the finished one."""
        return stream_outputs(self, request_id, prompt_token_ids, params)

    async def shutdown(self, grace_s: float = 10.0) -> None:
        """Stop accepting, let in-flight requests finish for up to grace_s, abort the rest, stop the
        engine process (SIGKILL if it has not exited _EXIT_WAIT_S later)."""
        self._accepting = False
        deadline = time.monotonic() + grace_s
        while self._requests and time.monotonic() < deadline and self.is_alive:
            await asyncio.sleep(0.05)
        with contextlib.suppress(OSError):
            self._send(ShutdownCore())
        await asyncio.to_thread(self._process.join, _EXIT_WAIT_S)
        if self._process.is_alive():
            logger.warning("the engine process did not exit %.0f s after shutdown; killing it", _EXIT_WAIT_S)
            self._kill()
        if self._loop is asyncio.get_running_loop():
            self._read_outputs()  # the engine's last batch (its aborts), then EOF
        else:
            self._read_if_unwatched()
        self._end_everything("the server is shutting down")
        self._close()

    # ------------------------------------------------------------------ reading the engine's outputs
    def _bind(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._loop is loop:
            return
        if self._loop is not None and not self._loop.is_closed():
            raise RuntimeError("ProcessEngine: submit from the event loop that already reads its outputs")
        # The previous loop is closed; so are the consumers of anything it left pending.
        for request_id in list(self._requests):
            self.abort(request_id)
        self._end_everything("their event loop has closed")
        self._loop = loop
        loop.add_reader(self._outputs.fileno(), self._read_outputs)

    def _read_if_unwatched(self) -> None:
        """With no open event loop watching the pipe (before the first submit, or after that loop
        closed), read what the engine process sent here, so stats and deaths are still seen."""
        if (self._loop is None or self._loop.is_closed()) and not self._outputs.closed:
            self._read_outputs()

    def _read_outputs(self) -> None:
        changed: dict[str, _Pending] = {}
        try:
            for _ in range(_MAX_BATCHES_PER_READ):
                if not self._outputs.poll():
                    break
                message = self._outputs.recv()
                if isinstance(message, StepBatch):
                    self._apply(message, changed)
                elif isinstance(message, CoreFailed):
                    logger.error("the engine loop failed: %s\n%s", message.error, message.traceback)
                    self._dead_reason = f"the engine loop failed: {message.error}"
        except (EOFError, OSError):
            self._process.join(5)
            if self._dead_reason is None and self._accepting:
                logger.error("the engine process died (%s); aborting every request", _describe_exit(self._process))
            self._dead_reason = self._dead_reason or self._death_reason()
            self._unwatch()
        self._deliver(changed)
        if self._dead_reason is not None:
            self._end_everything(self._dead_reason)

    def _apply(self, batch: StepBatch, changed: dict[str, _Pending]) -> None:
        requests = self._requests
        for delta in batch.deltas:
            pending = requests.get(delta.request_id)
            if pending is not None and not pending.assembly.aborted:
                pending.assembly.apply(delta)
                changed[delta.request_id] = pending
        for request_id in batch.aborted_ids:
            pending = requests.get(request_id)
            if pending is not None:
                pending.assembly.abort()
                changed[request_id] = pending
        self._stats = batch.stats

    def _deliver(self, changed: dict[str, _Pending]) -> None:
        for request_id, pending in changed.items():
            output = pending.assembly.snapshot()
            if output.finished:
                self._release(request_id, output)
            _put(pending.sink, output)

    def _release(self, request_id: str, final: RequestOutput) -> None:
        self._requests.pop(request_id, None)
        if self._on_finished is not None:
            try:
                self._on_finished(final)
            except Exception:  # metrics must never take the front down
                logger.exception("on_finished listener failed")

    def _end_everything(self, reason: str) -> None:
        """Every open request ends with "abort" (the engine process is gone or going)."""
        if self._requests:
            logger.info("ending %d open requests: %s", len(self._requests), reason)
        for request_id, pending in list(self._requests.items()):
            pending.assembly.abort()
            output = pending.assembly.snapshot()
            self._release(request_id, output)
            _put(pending.sink, output)

    # ------------------------------------------------------------------ plumbing
    def _send(self, command: Command) -> None:
        with self._send_lock:
            self._commands.send(command)

    def _death_reason(self) -> str:
        if self._dead_reason is not None:
            return self._dead_reason
        if not self._process.is_alive():
            return f"the engine process exited ({_describe_exit(self._process)})"
        return "the engine has stopped"

    def _unwatch(self) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(Exception):
                loop.remove_reader(self._outputs.fileno())

    def _close(self) -> None:
        self._unwatch()
        self._commands.close()
        self._outputs.close()
        atexit.unregister(self._kill)

    def _kill(self) -> None:
        """Make sure the engine process is gone (idempotent; also the exit handler)."""
        if self._process.is_alive():
            self._process.kill()
        self._process.join(10)


def _describe_exit(process: multiprocessing.process.BaseProcess) -> str:
    code = process.exitcode
    if code is None:
        return "still running"
    if code < 0:
        name = signal.Signals(-code).name
        hint = ", as the kernel's OOM killer sends" if -code == signal.SIGKILL else ""
        return f"killed by {name}{hint}"
    return f"exit code {code}"


def _put(sink: asyncio.Queue[RequestOutput], output: RequestOutput) -> None:
    # RuntimeError: the consumer's event loop is closed, so nobody is listening any more.
    with contextlib.suppress(RuntimeError):
        sink.put_nowait(output)
