"""The driver's side: start the ranks, and stand in for the model and its caches in the engine.

`DistributedExecutor.spawn(spec)` starts one process per rank (spawn context; CPU ranks on the
CPU, GPU rank r on local GPU r), each with a pipe back to the driver, and waits until every rank
has loaded its shards; a rank that fails to start is reported by rank and message. Steps go to
rank 0 only, which relays them to the others through torch.distributed (worker.py).
`DistributedExecutor.in_process(spec)` is the torchrun form: this process is rank 0 itself.

`RemoteModel` and `RemoteCacheState` have the two interfaces the engine's `ModelRunner` uses
(`forward(batch, state)`; `set_block_tables` / `free_sequence`): the cache state records the
block-table changes the driver's block manager makes, and the next step carries them to every rank.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import multiprocessing
import os
import socket
import time
from collections.abc import Hashable, Mapping, Sequence

import numpy as np
import torch

from mxserve.config import ModelConfig
from mxserve.distributed.worker import (
    Failure,
    InitCaches,
    RankReport,
    RankWorker,
    Ready,
    Rebuild,
    Shutdown,
    Step,
    WorkerSpec,
    worker_process_main,
)
from mxserve.model.forward_batch import ForwardBatch
from mxserve.model.kv_state import Pool, units_for
from mxserve.model.numerics import NumericPolicy

logger = logging.getLogger("mxserve.distributed")

TORCHRUN_FLAG = "MXSERVE_TORCHRUN_RANK0"  # set by `python -m mxserve.cli.launch` on torchrun's rank 0
_POLL_S = 0.2  # how often the driver checks that the ranks are alive while it waits
_STARTUP_TIMEOUT_S = 1800.0  # loading a 160 GB checkpoint is slow; a dead rank is noticed at once


class WorkerError(RuntimeError):
    """A rank failed (startup or step); the message names the rank and its exception."""


def torchrun_backend() -> str:
    """NCCL where the rank sees a GPU, else gloo; MXSERVE_DIST_BACKEND overrides (same on every rank)."""
    return os.environ.get("MXSERVE_DIST_BACKEND") or ("nccl" if torch.cuda.is_available() else "gloo")


def _free_tcp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class DistributedExecutor:
    def __init__(self) -> None:
        self.reports: tuple[RankReport, ...] = ()
        self._processes: list = []
        self._conns: list = []
        self._local: RankWorker | None = None
        self._closed = False

    # ------------------------------------------------------------------ start
    @classmethod
    def start(cls, spec: WorkerSpec) -> DistributedExecutor:
        """Join torchrun's group as rank 0 when launched by `mxserve.cli.launch`, else spawn the ranks."""
        return cls.in_process(spec) if os.environ.get(TORCHRUN_FLAG) == "1" else cls.spawn(spec)

    @classmethod
    def spawn(cls, spec: WorkerSpec) -> DistributedExecutor:
        self = cls()
        world_size = spec.parallel.tensor_parallel_size
        if spec.device == "cuda" and torch.cuda.device_count() < world_size:
            raise ValueError(f"tensor_parallel_size={world_size} needs {world_size} GPUs; torch sees "
                             f"{torch.cuda.device_count()}")
        context = multiprocessing.get_context("spawn")
        init_method = f"tcp://127.0.0.1:{_free_tcp_port()}"
        for rank in range(world_size):
            parent, child = context.Pipe()
            process = context.Process(target=worker_process_main, args=(spec, rank, init_method, child),
                                      name=f"mxserve-rank{rank}", daemon=True)
            process.start()
            child.close()
            self._processes.append(process)
            self._conns.append(parent)
        try:
            ready = self._receive(timeout_s=_STARTUP_TIMEOUT_S)
        except BaseException:
            self.close()
            raise
        if not isinstance(ready, Ready):
            self.close()
            raise WorkerError(f"rank 0 answered the start with {type(ready).__name__}")
        self.reports = ready.reports
        atexit.register(self.close)  # let the ranks leave their process group cleanly
        return self

    @classmethod
    def in_process(cls, spec: WorkerSpec) -> DistributedExecutor:
        """Under torchrun: this process is rank 0 (RANK=0 in the environment); the other ranks run
        `python -m mxserve.distributed.launch` and follow it."""
        self = cls()
        backend = torchrun_backend()
        if (backend == "nccl") != (spec.device == "cuda"):
            raise ValueError(f"the torchrun ranks use {backend} (MXSERVE_DIST_BACKEND or GPU presence) but the "
                             f"engine's device is {spec.device}")
        world_size = int(os.environ.get("WORLD_SIZE", "0"))
        if world_size != spec.parallel.tensor_parallel_size:
            raise ValueError(f"torchrun started {world_size} ranks, tensor_parallel_size is "
                             f"{spec.parallel.tensor_parallel_size}")
        self._local = RankWorker(spec, backend=backend)
        if self._local.groups.rank != 0:
            raise WorkerError(f"the in-process executor must be rank 0, this process is rank {self._local.groups.rank}")
        self.reports = tuple(self._local.groups.gather_objects(self._local.report))  # type: ignore[arg-type]
        atexit.register(self.close)  # the other ranks wait for rank 0's Shutdown
        return self

    # ------------------------------------------------------------------ messages
    def _receive(self, *, timeout_s: float) -> object:
        deadline = time.monotonic() + timeout_s
        while True:
            for rank, conn in enumerate(self._conns):
                if conn.poll():
                    try:
                        reply = conn.recv()
                    except EOFError:
                        continue
                    if isinstance(reply, Failure):
                        self.close()
                        raise WorkerError(f"rank {reply.rank} failed: {reply.message}\n{reply.traceback}")
                    if rank == 0:
                        return reply
            for rank, process in enumerate(self._processes):
                if not process.is_alive():
                    self.close()
                    raise WorkerError(f"rank {rank} exited (exit code {process.exitcode}); see its stderr")
            if time.monotonic() > deadline:
                self.close()
                raise WorkerError(f"no answer from rank 0 within {timeout_s:.0f} s")
            self._conns[0].poll(_POLL_S)

    def call(self, message: object) -> object:
        if self._closed:
            raise WorkerError("the distributed executor is closed")
        if self._local is not None:
            return self._local.lead(message)
        self._conns[0].send(message)
        return self._receive(timeout_s=float("inf"))

    def rebuild(self, spec: WorkerSpec) -> None:
        """Load another checkpoint / plan on the same ranks (tests compare several without respawning)."""
        if spec.parallel.tensor_parallel_size != len(self.reports):
            raise ValueError(f"rebuild keeps the world size ({len(self.reports)} ranks), got "
                             f"tensor_parallel_size={spec.parallel.tensor_parallel_size}")
        ready = self.call(Rebuild(spec))
        if not isinstance(ready, Ready):
            raise WorkerError(f"rank 0 answered a rebuild with {type(ready).__name__}")
        self.reports = ready.reports

    def init_caches(self, num_blocks: Mapping[str, int] | int, block_size: int, *, manage_tables: bool) -> None:
        self.call(InitCaches(num_blocks, block_size, manage_tables))

    def forward(self, batch: ForwardBatch, table_ops: Sequence[tuple]) -> torch.Tensor:
        logits = self.call(Step.of(batch, table_ops))
        if not isinstance(logits, np.ndarray):
            raise WorkerError(f"rank 0 answered a step with {type(logits).__name__}")
        return torch.from_numpy(logits)

    def close(self) -> None:
        """Stop every rank (idempotent)."""
        if self._closed:
            return
        self._closed = True
        if self._local is not None:
            try:
                self._local.lead(Shutdown())
            finally:
                from mxserve.distributed.groups import destroy_groups

                destroy_groups()
            return
        try:
            if self._processes and self._processes[0].is_alive():
                self._conns[0].send(Shutdown())
        except (BrokenPipeError, OSError):
            pass
        for process in self._processes:
            process.join(timeout=10)
            if process.is_alive():
                process.terminate()
                process.join(timeout=5)
        for conn in self._conns:
            conn.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


def log_rank_kernel_choices(reports: Sequence[RankReport]) -> None:
    """Log rank 0's kernel choices with their reasons, then any other rank's lines that differ
    (a rank whose shard a Triton candidate cannot implement says so by rank)."""
    engine_log = logging.getLogger("mxserve.engine")  # where the single-process engine logs its choices
    first = reports[0].kernel_log if reports else ()
    for line in first:
        engine_log.info("rank 0: %s", line)
    for report in reports[1:]:
        for line in report.kernel_log:
            if line not in first:
                engine_log.info("rank %d: %s", report.rank, line)


# ---------------------------------------------------------------------- engine-facing stand-ins
class RemoteCacheState:
    """Records the block-table changes the engine makes; the next step carries them to the ranks."""

    def __init__(self) -> None:
        self._ops: list[tuple] = []

    def set_block_tables(self, key: Hashable, tables: Mapping[str, Sequence[int]]) -> None:
        self._ops.append(("set", key, {pool: list(pages) for pool, pages in tables.items()}))

    def free_sequence(self, key: Hashable) -> None:
        self._ops.append(("free", key))

    def drain(self) -> list[tuple]:
        ops, self._ops = self._ops, []
        return ops


class RemoteModel:
    """The model as the engine sees it when its ranks live in other processes."""

    def __init__(self, config: ModelConfig, policy: NumericPolicy, executor: DistributedExecutor) -> None:
        self.config = config
        self.policy = policy
        self.executor = executor

    def forward(self, batch: ForwardBatch, state: RemoteCacheState) -> torch.Tensor:
        return self.executor.forward(batch, state.drain())

    def new_cache_state(self, *, max_sequences: int, max_positions: int, block_size: int = 64,
                        device: torch.device | str = "cpu") -> RemoteCacheState:
        """`DeepseekV4Model.new_cache_state` for the ranks: fresh caches with rank-managed tables, so
        the single-process loops (`mxserve.model.greedy`) run unchanged on a parallel model."""
        del device  # the ranks allocate on their own devices
        counts = {pool.value: max_sequences * max(1, -(-units_for(self.config, pool, max_positions) // block_size))
                  for pool in Pool}
        self.executor.init_caches(counts, block_size, manage_tables=True)
        return RemoteCacheState()

    def close(self) -> None:
        self.executor.close()
