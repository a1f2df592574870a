"""The engine process: an `LLMEngine` and its step loop, away from the HTTP server's GIL.

`run_engine_core` is the entry of the process `ProcessEngine` spawns. It loads the engine (the
checkpoint, caches, CUDA graphs when asked: all before it reports `CoreReady`, so the server
is ready only once the engine is), then loops: apply the commands that arrived (an idle engine first
gathers a burst for a few ms: `BURST_GAP_S`), run one step when any request is unfinished, send one
`StepBatch` with every changed request's delta and the stats.

A thread reads commands from the server's pipe into a queue, so the loop never waits on the
pipe and a full output pipe can never keep a command from being read. When that pipe closes (the
server process died without shutting the engine down) the thread queues a shutdown: the engine
process never outlives its server. Terminal SIGINT/SIGTERM are ignored here: a Ctrl-C reaches
the whole process group, and the server's graceful shutdown, not the signal, decides when the
engine stops (it sends `ShutdownCore`).

Failures: loading that raises sends `CoreFailed("start", ...)`; a step that raises sends
`CoreFailed("step", ...)`; either way the process then exits (the server ends every open stream
with "abort"). Log lines go to this process's stderr, the server's terminal, in the server's
format and level.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection

from mxserve.config import ConfigError
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
from mxserve.engine.llm_engine import LLMEngine
from mxserve.engine.output_deltas import DeltaTracker
from mxserve.model.checkpoint import CheckpointError

logger = logging.getLogger("mxserve.engine.core")

EngineSetup = Callable[[LLMEngine], None]


@dataclass(frozen=True)
class CoreSpec:
    """What the engine process needs to start (pickled to it)."""

    engine_config: EngineConfig
    capture_graphs: bool  # capture every CUDA-graph bucket before reporting ready
    progress: bool  # the checkpoint loader's progress bar (on the server's terminal)
    log_level: int  # the server's root log level, applied here
    log_format: str
    # Test/benchmark hook, not a serving feature: a picklable callable run on the loaded engine before
    # graph capture (benchmarks/server_overhead.py stubs the forward with it).
    engine_setup: EngineSetup | None = None


def run_engine_core(spec: CoreSpec, commands: Connection, outputs: Connection) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    logging.basicConfig(level=spec.log_level, format=spec.log_format, stream=sys.stderr)
    try:
        engine = LLMEngine(spec.engine_config, progress=spec.progress)
        if spec.engine_setup is not None:
            spec.engine_setup(engine)
        if spec.capture_graphs:
            engine.capture_graphs()
    except BaseException as exc:
        bad_input = isinstance(exc, (CheckpointError, ConfigError))
        outputs.send(CoreFailed("start", _one_line(exc), traceback.format_exc(), bad_input))
        return
    try:
        outputs.send(CoreReady(engine.info, engine.stats()))
        _EngineLoop(engine, outputs).run(_command_queue(commands))
    except BaseException as exc:
        logger.exception("the engine loop failed")
        with contextlib.suppress(OSError):  # the server may be gone too
            outputs.send(CoreFailed("step", _one_line(exc), traceback.format_exc()))
    finally:
        engine.close()


def _one_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"


def _command_queue(commands: Connection) -> queue.SimpleQueue[Command]:
    inbox: queue.SimpleQueue[Command] = queue.SimpleQueue()

    def read() -> None:
        try:
            while True:
                inbox.put(commands.recv())
        except (EOFError, OSError):
            inbox.put(ShutdownCore())  # the server process is gone: stop rather than run orphaned

    threading.Thread(target=read, name="mxserve-core-commands", daemon=True).start()
    return inbox


# An idle engine that receives a request waits up to BURST_GAP_S for the next one (at most BURST_CAP_S
# in all) before its first step, so that requests sent together are prefilled together. Why (H200,
# session 14 call 4): 8 clients starting at once got TTFT p50 135 ms here against 68-71 ms in the
# threaded server. Here the first request's eager prefill step (~60 ms) started alone and the other 7
# waited for a second one; the threaded engine, sharing the GIL with the HTTP thread, only ran after
# the whole burst had been parsed. A burst's requests reach this process within a few ms of each
# other; a lone request pays the gap once (2 ms against its ~60 ms prefill). A busy engine does not
# wait: what arrives during a step joins the next one anyway.
BURST_GAP_S = 0.002
BURST_CAP_S = 0.010


def _next_command(inbox: queue.SimpleQueue[Command], gap_s: float, deadline: float) -> Command:
    """The next queued command: waiting up to gap_s (never past deadline) while gathering a burst,
    else only what is already there. Raises queue.Empty when none comes."""
    wait = min(gap_s, deadline - time.monotonic())
    return inbox.get(timeout=wait) if wait > 0 else inbox.get_nowait()


class _EngineLoop:
    def __init__(self, engine: LLMEngine, outputs: Connection, *, burst_gap_s: float = BURST_GAP_S,
                 burst_cap_s: float = BURST_CAP_S) -> None:
        self.engine = engine
        self.outputs = outputs
        self.deltas = DeltaTracker()
        self.burst_gap_s = burst_gap_s
        self.burst_cap_s = burst_cap_s

    def run(self, inbox: queue.SimpleQueue[Command]) -> None:
        engine = self.engine
        while True:
            # Block for a command only when there is nothing to step; then gather the rest of a burst.
            idle = not engine.has_unfinished_requests()
            command: Command | None = inbox.get() if idle else None
            aborted: list[str] = []
            refusals: dict[str, str] = {}
            stopping = False
            deadline = time.monotonic() + self.burst_cap_s if idle else 0.0
            while True:
                if command is not None:
                    stopping |= self._apply(command, aborted, refusals)
                try:
                    command = _next_command(inbox, self.burst_gap_s, deadline)
                except queue.Empty:
                    break
            if stopping:
                for request_id in engine.unfinished_request_ids():
                    engine.abort_request(request_id)
                    self.deltas.forget(request_id)
                    aborted.append(request_id)
                self.outputs.send(StepBatch([], aborted, engine.stats(), refusals))
                return
            deltas = []
            if engine.has_unfinished_requests():
                deltas = [self.deltas.delta(output) for output in engine.step()]
            if deltas or aborted:  # aborts change the stats (pages freed) even without a step
                self.outputs.send(StepBatch(deltas, aborted, engine.stats(), refusals))

    def _apply(self, command: Command, aborted: list[str], refusals: dict[str, str]) -> bool:
        """Apply one command; True for a shutdown."""
        if isinstance(command, AddRequest):
            try:
                self.engine.add_request(command.request_id, command.prompt_token_ids, command.params)
            except ValueError as exc:
                # The server validates before submitting, so this is a race or a bug; end the stream.
                logger.warning("request %s refused by the engine: %s", command.request_id, exc)
                refusals[command.request_id] = str(exc)
                aborted.append(command.request_id)
        elif isinstance(command, AbortRequest):
            if self.engine.abort_request(command.request_id):
                self.deltas.forget(command.request_id)
                aborted.append(command.request_id)
        elif isinstance(command, ShutdownCore):
            return True
        return False
