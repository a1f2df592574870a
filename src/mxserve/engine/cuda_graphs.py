"""CUDA-graph decode: batch-size buckets, padding, capture/replay, and the reasons a step runs eager.

A decode step (every chunk one token) whose batch fits a bucket in `BUCKETS` could replay a graph
captured once for that bucket: inputs are copied into static buffers padded to the bucket (pad
rows are dummies whose outputs are dropped), the graph is replayed, and the first `n` output
rows are returned. Anything else runs eager, and the runner is told why (`GraphDecision.reason`):
prefill chunks, a batch above the largest bucket, CPU devices, `EngineConfig.enforce_eager`, or a
forward that is not capturable.

Status (honest): the DeepSeek-V4 forward is NOT capturable today. Its attention path syncs with
the host (`int(visible.max())` sizes the compressed-entry candidates) and loops over sequences in
Python (per-sequence page tables, chunk lengths), so a captured graph would bake one batch's
control flow in. `DeepseekV4Model` therefore does not declare `supports_cuda_graphs`, every GPU
decode step runs eager with that reason (logged once), and nothing here claims a capture that
never ran. `GraphPool` is the generic capture/replay machinery for a forward that declares itself
capturable (static shapes, no host syncs); its GPU test captures a static function and checks
replay == eager bit for bit.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

logger = logging.getLogger("mxserve.engine")

BUCKETS: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)  # decode batch sizes a graph is captured for

NOT_CAPTURABLE = ("the model's decode forward is not capturable: attention syncs with the host "
                  "(int(visible.max())) and loops over sequences in Python (mxserve.model.attention)")


def bucket_for(batch_size: int, buckets: Sequence[int] = BUCKETS) -> int | None:
    """The smallest bucket >= batch_size; None when the batch is empty or above the largest."""
    if batch_size <= 0:
        return None
    return next((b for b in sorted(buckets) if b >= batch_size), None)


def pad_to_bucket(values: torch.Tensor, bucket: int, fill: float | int = 0) -> torch.Tensor:
    """values [n, ...] → [bucket, ...], rows n.. filled with `fill` (padding lanes never sampled)."""
    n = values.shape[0]
    if n > bucket:
        raise ValueError(f"pad_to_bucket: {n} rows do not fit bucket {bucket}")
    out = values.new_full((bucket, *values.shape[1:]), fill)
    out[:n] = values
    return out


@dataclass(frozen=True)
class GraphDecision:
    bucket: int | None  # the bucket to replay; None = run eager
    reason: str | None  # why eager (None when replaying)

    @property
    def is_eager(self) -> bool:
        return self.bucket is None


def decide(chunk_num_tokens: Sequence[int], *, enforce_eager: bool, device_type: str, model_capturable: bool,
           buckets: Sequence[int] = BUCKETS) -> GraphDecision:
    """Whether one step can replay a decode graph, and if not, exactly why (first reason that applies)."""
    if enforce_eager:
        return GraphDecision(None, "enforce_eager=True")
    if device_type != "cuda":
        return GraphDecision(None, f"device is {device_type} (CUDA graphs need a CUDA device)")
    if not model_capturable:
        return GraphDecision(None, NOT_CAPTURABLE)
    if any(n != 1 for n in chunk_num_tokens):
        return GraphDecision(None, "prefill chunk(s) in the step (only one-token decodes are captured)")
    bucket = bucket_for(len(chunk_num_tokens), buckets)
    if bucket is None:
        return GraphDecision(None, f"batch of {len(chunk_num_tokens)} is above the largest bucket {max(buckets)}")
    return GraphDecision(bucket, None)


@dataclass
class EagerStats:
    """How many steps ran eager, per reason; each reason is logged once (never silently)."""

    counts: Counter = field(default_factory=Counter)

    def record(self, reason: str) -> None:
        if reason not in self.counts:
            logger.info("CUDA graphs: step runs eager (%s); further steps with this reason are counted, not logged",
                        reason)
        self.counts[reason] += 1


class GraphPool:
    """Captured graphs of `fn(static_input) -> output` per bucket, for a capturable `fn`.

    `fn` must have static shapes and no host syncs. Inputs are [n, ...] tensors padded to the
    bucket with `pad_fill`; `run(x)` returns the first n rows of the replayed output. A capture
    that fails raises (the caller decides to run eager and says why)."""

    def __init__(self, fn: Callable[[torch.Tensor], torch.Tensor], *, buckets: Sequence[int] = BUCKETS,
                 pad_fill: float | int = 0, warmup_iters: int = 2) -> None:
        self.fn = fn
        self.buckets = tuple(sorted(buckets))
        self.pad_fill = pad_fill
        self.warmup_iters = warmup_iters
        self._graphs: dict[int, tuple[torch.cuda.CUDAGraph, torch.Tensor, torch.Tensor]] = {}
        self._mempool = None

    def captured_buckets(self) -> tuple[int, ...]:
        return tuple(sorted(self._graphs))

    def capture(self, bucket: int, example: torch.Tensor) -> None:
        """Capture `fn` on a static [bucket, ...] buffer shaped like `example`'s rows."""
        if example.device.type != "cuda":
            raise ValueError(f"GraphPool.capture: needs a CUDA tensor, got {example.device}")
        static_in = pad_to_bucket(example[:bucket], bucket, self.pad_fill).clone()
        stream = torch.cuda.Stream(device=example.device)
        stream.wait_stream(torch.cuda.current_stream(example.device))
        with torch.cuda.stream(stream):  # warm up outside the graph (allocations, autotuning, lazy init)
            for _ in range(self.warmup_iters):
                self.fn(static_in)
        torch.cuda.current_stream(example.device).wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        if self._mempool is None:
            self._mempool = torch.cuda.graph_pool_handle()
        with torch.cuda.graph(graph, pool=self._mempool):
            static_out = self.fn(static_in)
        self._graphs[bucket] = (graph, static_in, static_out)

    def run(self, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[0]
        bucket = bucket_for(n, self.buckets)
        if bucket is None or bucket not in self._graphs:
            raise KeyError(f"GraphPool.run: no captured graph for a batch of {n} (captured {self.captured_buckets()})")
        graph, static_in, static_out = self._graphs[bucket]
        static_in.copy_(pad_to_bucket(x, bucket, self.pad_fill))
        graph.replay()
        return static_out[:n].clone()
