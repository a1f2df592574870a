"""A rank: joins the process group, loads its shards, keeps its caches, runs steps.

Rank 0 leads: each message it gets from the driver (`InitCaches`, `Step`, `Shutdown`) it first
broadcasts to the other ranks over the gloo control group, then handles itself, so every rank
runs the same step and meets the same collectives in the same order. The other ranks loop on
that broadcast (`follow`). The scheduler never leaves the driver: a `Step` carries the batch and
the block-table changes the driver's block manager made since the last step.

`worker_process_main` is the entry of a process spawned by the engine (one per rank, a pipe to the
driver each); `python -m mxserve.distributed.launch` runs the same classes under torchrun.
"""

from __future__ import annotations

import math
import os
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from mxserve.distributed.groups import ParallelGroups, add_attention_groups, destroy_groups, init_world
from mxserve.distributed.plan import ParallelConfig, ShardingPlan
from mxserve.distributed.rank_kernels import captured_choice_log
from mxserve.distributed.shards import load_rank_weights, weight_nbytes
from mxserve.distributed.tp_model import TensorParallelModel
from mxserve.model.checkpoint import CheckpointReader
from mxserve.model.forward_batch import ForwardBatch, SequenceChunk
from mxserve.model.kv_state import ModelCacheState


@dataclass(frozen=True)
class WorkerSpec:
    """What every rank needs to build its part of the model (sent to each spawned process)."""

    model_dir: str
    parallel: ParallelConfig
    numerics: str
    kv_cache_dtype: str | None
    resident_weights: bool  # decode linears once into fp64 (small models on the CPU)
    device: str  # "cpu" or "cuda" (rank r uses its local GPU r)
    cpu_threads: int | None  # torch intra-op threads per rank on the CPU (None: torch's default)
    # op -> backend, resolved once by the driver (EngineConfig.kernel_overrides over MXSERVE_KERNEL_OVERRIDES),
    # so every rank applies the same overrides; each chooses per layer over its own shards (rank_kernels)
    kernel_overrides: tuple[tuple[str, str], ...] = ()
    max_model_len: int | None = None  # the engine's limit (sizes the attention chooser); None: the model's


# ---------------------------------------------------------------------- messages
@dataclass(frozen=True)
class InitCaches:
    num_blocks: Mapping[str, int] | int  # pages per pool (every rank holds the same caches)
    block_size: int
    manage_tables: bool  # True: ranks grow block tables themselves (tests, tools)


@dataclass(frozen=True)
class Step:
    table_ops: tuple[tuple, ...]  # ("set", key, {pool: pages}) / ("free", key), in order
    token_ids: list[int]  # [T]
    positions: list[int]  # [T]
    chunks: tuple[SequenceChunk, ...]
    logits_rows: list[int] | None

    @classmethod
    def of(cls, batch: ForwardBatch, table_ops: Sequence[tuple]) -> Step:
        rows = None if batch.logits_rows is None else batch.logits_rows.tolist()
        return cls(tuple(table_ops), batch.token_ids.tolist(), batch.positions.tolist(), batch.chunks, rows)

    def batch(self, device: torch.device) -> ForwardBatch:
        rows = None if self.logits_rows is None else torch.tensor(self.logits_rows, dtype=torch.int64, device=device)
        return ForwardBatch(torch.tensor(self.token_ids, dtype=torch.int64, device=device),
                            torch.tensor(self.positions, dtype=torch.int64, device=device), self.chunks, rows)


@dataclass(frozen=True)
class Rebuild:
    spec: WorkerSpec  # load another checkpoint or plan on the same ranks (same world size)


@dataclass(frozen=True)
class Shutdown:
    pass


@dataclass(frozen=True)
class RankReport:
    rank: int
    device: str
    weight_bytes: int  # bytes of the rank's weights as loaded (packed codes + scales, plain tensors)
    resident_bytes: int  # bytes the model keeps for them (weight_bytes, or 8/parameter when decoded once)
    free_device_bytes: int | None  # free GPU memory after loading (None on the CPU)
    plan: str  # the sharding plan, one line
    kernel_log: tuple[str, ...] = ()  # the rank's kernel choices with their reasons (INFO lines of the chooser)


@dataclass(frozen=True)
class Ready:
    reports: tuple[RankReport, ...]


@dataclass(frozen=True)
class Failure:
    rank: int
    message: str  # the exception, one line
    traceback: str


# ---------------------------------------------------------------------- the rank
class RankWorker:
    def __init__(self, spec: WorkerSpec | None, *, rank: int | None = None, world_size: int | None = None,
                 init_method: str | None = None, backend: str | None = None) -> None:
        """Spawned ranks pass their spec, rank and tcp init method; under torchrun (init_method None)
        only rank 0 has the spec and broadcasts it once the world group exists."""
        if backend is None:
            backend = "nccl" if spec is not None and spec.device == "cuda" else "gloo"
        self.groups: ParallelGroups = init_world(rank=rank, world_size=world_size, init_method=init_method,
                                                 backend=backend)
        self.backend = backend
        spec = self.groups.broadcast_object(spec)  # type: ignore[assignment]
        self.build(spec)  # type: ignore[arg-type]

    def build(self, spec: WorkerSpec) -> None:
        """Load this rank's shards of `spec`'s checkpoint and build its model (caches come with InitCaches)."""
        if not isinstance(spec, WorkerSpec):
            raise TypeError(f"expected a WorkerSpec, got {type(spec).__name__}")
        self.spec = spec
        rank = self.groups.rank
        if spec.device == "cuda":
            local_rank = int(os.environ.get("LOCAL_RANK", rank % max(torch.cuda.device_count(), 1)))
            self.device = torch.device("cuda", local_rank)
            torch.cuda.set_device(self.device)
        else:
            self.device = torch.device("cpu")
            if spec.cpu_threads is not None:
                torch.set_num_threads(spec.cpu_threads)
        reader = CheckpointReader(spec.model_dir)
        self.plan = ShardingPlan.build(reader.config, spec.parallel)
        add_attention_groups(self.groups, self.plan, self.backend)
        weights = load_rank_weights(reader, self.plan, rank)
        weight_bytes = weight_nbytes(weights)
        if self.device.type != "cpu":
            weights = {name: w.to(self.device) for name, w in weights.items()}
        with captured_choice_log() as kernel_log:
            self.model = TensorParallelModel(reader.config, weights, self.plan, self.groups, numerics=spec.numerics,
                                             kv_cache_dtype=spec.kv_cache_dtype, resident_weights=spec.resident_weights,
                                             kernel_overrides=dict(spec.kernel_overrides),
                                             max_model_len=spec.max_model_len, device=self.device)
        resident = weight_bytes
        if spec.resident_weights:  # DeepseekV4Model decodes every linear (and the head) into fp64
            decoded = set(reader.inventory.linears) | {"head.weight"}
            resident = weight_nbytes({n: w for n, w in weights.items() if n not in decoded})
            resident += 8 * sum(math.prod(w.shape) for n, w in weights.items() if n in decoded)
        free = torch.cuda.mem_get_info(self.device)[0] if self.device.type == "cuda" else None
        self.report = RankReport(rank, str(self.device), weight_bytes, resident, free, self.plan.describe(),
                                 tuple(kernel_log))
        self.state: ModelCacheState | None = None

    def handle(self, message: object) -> object | None:
        if isinstance(message, Rebuild):
            self.build(message.spec)
            return Ready(tuple(self.groups.gather_objects(self.report)))  # type: ignore[arg-type]
        if isinstance(message, InitCaches):
            self.state = ModelCacheState(self.model.config, self.model.policy, num_blocks=message.num_blocks,
                                         block_size=message.block_size, manage_tables=message.manage_tables,
                                         device=self.device)
            return None
        if isinstance(message, Step):
            if self.state is None:
                raise RuntimeError("a step arrived before the caches were allocated (InitCaches)")
            _apply_table_ops(self.state, message.table_ops)
            logits = self.model.forward(message.batch(self.device), self.state)
            return logits.cpu().numpy() if self.groups.rank == 0 else None
        raise TypeError(f"rank {self.groups.rank}: unknown message {type(message).__name__}")

    def lead(self, message: object) -> object | None:
        """Rank 0: send `message` to every rank, then handle it here."""
        self.groups.broadcast_object(message)
        return None if isinstance(message, Shutdown) else self.handle(message)

    def follow(self) -> None:
        """Ranks > 0: handle rank 0's messages until Shutdown."""
        while not isinstance(message := self.groups.broadcast_object(None), Shutdown):
            self.handle(message)


def _apply_table_ops(state: ModelCacheState, ops: Sequence[tuple]) -> None:
    for op in ops:
        if op[0] == "set":
            state.set_block_tables(op[1], op[2])
        elif op[0] == "free":
            state.free_sequence(op[1])
        else:
            raise ValueError(f"unknown block-table op {op[0]!r}")


# ---------------------------------------------------------------------- spawned process entry
def worker_process_main(spec: WorkerSpec, rank: int, init_method: str, conn) -> None:
    """Entry of one spawned rank. Rank 0 relays the driver's messages; every rank reports a startup
    failure on its own pipe so the driver can say which rank failed and why."""
    try:
        worker = RankWorker(spec, rank=rank, world_size=spec.parallel.tensor_parallel_size, init_method=init_method)
        reports = worker.groups.gather_objects(worker.report)
    except BaseException as exc:
        conn.send(Failure(rank, f"{type(exc).__name__}: {exc}", traceback.format_exc()))
        raise
    try:
        if rank == 0:
            conn.send(Ready(tuple(reports)))  # type: ignore[arg-type]
            _relay(worker, conn)
        else:
            worker.follow()
    finally:
        destroy_groups()


def _relay(worker: RankWorker, conn) -> None:
    while True:
        try:
            message = conn.recv()
        except EOFError:  # the driver is gone: stop every rank
            message = Shutdown()
        try:
            reply = worker.lead(message)
        except BaseException as exc:
            conn.send(Failure(0, f"{type(exc).__name__}: {exc}", traceback.format_exc()))
            raise
        if isinstance(message, Shutdown):
            return
        conn.send(reply)


__all__ = ["Failure", "InitCaches", "RankReport", "RankWorker", "Ready", "Rebuild", "Shutdown", "Step", "WorkerSpec",
           "worker_process_main"]
