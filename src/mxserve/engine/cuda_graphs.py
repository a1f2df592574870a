"""CUDA-graph decode: batch-size buckets, padding, capture/replay, and the reasons a step runs eager.

A decode step (every chunk one token) whose batch fits a bucket in `BUCKETS` could replay a graph
captured once for that bucket: inputs are copied into static buffers padded to the bucket (pad
rows are dummies whose outputs are dropped), the graph is replayed, and the first `n` output
rows are returned. Anything else runs eager, and the runner is told why (`GraphDecision.reason`):
prefill chunks, a batch above the largest bucket, CPU devices, `EngineConfig.enforce_eager`, or a
forward that is not capturable. A step in which prefill chunks join decodes is split by the runner:
the decodes replay, the prefill chunks run eager (`ModelRunner._split_step`). With
`MXSERVE_PREFILL_ROWS=1` (opt-in) a step whose tokens all fit a bucket replays instead, one row per
token (`prefill_rows_enabled`).

`DecodeGraphs` is the model-specific part: one graph of `DeepseekV4Model.decode_forward` per
bucket, against static device buffers (`DecodeBatch`: tokens, positions, padded block tables)
sized by the engine's `DecodeGeometry` (max_model_len). A bucket is captured on first use, or
ahead of traffic by `prepare` (what `LLMEngine.capture_graphs` does for a server at start-up: a
capture costs ~0.1-0.3 s, and one in the middle of serving stalls every running request). The
capture runs on all-padding buffers: padding rows have no pages, so they write nothing and the
capture cannot disturb a cache. Each step the host fills pinned buffers (`build_decode_batch`,
which validates what a device check would sync for), copies them into the static buffers without
a synchronisation, and replays.

`GraphCapturer` is how every graph here and in the speculative step is made: one plain call (lazy
one-time work such as stacking experts or caching a device scalar may sync), one call under
`torch.cuda.set_sync_debug_mode("error")` (a steady-state sync — a kernel's data-dependent
validation, a `nonzero`, a pageable copy — makes the part unavailable, and the reason names the
first syncing frame; every step then runs eager with it), warm-ups on a side stream, the capture.
The plain first call matters: a 1-token prompt makes the very first forward of an engine a decode
step, and probing that one refused graphs for the engine's whole life (H200, 2026-12-03: batch
generation from BOS ran every step eager at ~1.5k tok/s).

Status (honest, H200 2026-11-29): with every Triton kernel forced (`linear=triton,moe=triton,
attention=triton`) the probe passes and steps replay: the default model's greedy 64 tokens equal
`enforce_eager` token for token and in the sampled logits bit for bit (5 prompts, bucket 8), and
serving captured buckets 1, 2, 8, 32 and 64 (docs/benchmarks.md). That took making the cache slot
checks host-free on CUDA (`PageLayout.check_slots`, `check_unique_slots`), fixed-shape paged cache
writes/reads, and a cached router scalar. With the default reference kernels the probe refuses
capture — the reference MoE selects per expert with `nonzero` (and the reference top-k checks NaN
on the host) — names the frame, and every decode step runs eager, as tested.
"""

from __future__ import annotations

import logging
import os
import traceback
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from mxserve.model.decode_batch import DecodeBatch, DecodeGeometry, build_decode_batch

logger = logging.getLogger("mxserve.engine")

BUCKETS: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)  # decode batch sizes a graph is captured for
# Row counts a step may replay beyond a decode batch: prefill rows (a chunk's tokens as rows) and the
# speculative verify (K + 1 rows a request). Off by default; MXSERVE_DECODE_MAX_ROWS (below) and
# MXSERVE_SPEC_VERIFY_MAX_ROWS (speculative/step_graphs.py) opt in.
ROW_BUCKETS: tuple[int, ...] = (*BUCKETS, 128, 256, 512)
DEFAULT_MAX_ROWS = 64


def row_buckets_from_env(variable: str) -> tuple[int, ...]:
    """The buckets up to the largest that `variable` names (one of ROW_BUCKETS; default 64)."""
    text = os.environ.get(variable, str(DEFAULT_MAX_ROWS))
    if text not in {str(b) for b in ROW_BUCKETS}:
        raise ValueError(f"{variable}={text!r}: expected one of {list(ROW_BUCKETS)}")
    return tuple(b for b in ROW_BUCKETS if b <= int(text))


def decode_buckets_from_env() -> tuple[int, ...]:
    """MXSERVE_DECODE_MAX_ROWS (default 64): the largest bucket of the plain decode graphs. 128-512
    let a step of prefill rows (MXSERVE_PREFILL_ROWS=1) up to that many tokens replay a graph instead
    of running eager — a 128-token prompt alone, or a budget of 256 tokens shared by a batch — and
    batches of more than 64 requests replay too. Each bucket is one more capture at start-up."""
    return row_buckets_from_env("MXSERVE_DECODE_MAX_ROWS")


def static_decode_buffers() -> bool:
    """MXSERVE_DECODE_GRAPHS=1: the decode graphs' static-buffer path (no capture) also off CUDA, so the
    CPU tests run the runner's graphed decode and its split steps; `auto` (default): CUDA only."""
    mode = os.environ.get("MXSERVE_DECODE_GRAPHS", "auto")
    if mode not in ("auto", "1"):
        raise ValueError(f"MXSERVE_DECODE_GRAPHS={mode!r}: expected auto or 1 (enforce_eager turns graphs off)")
    return mode == "1"


def prefill_rows_enabled() -> bool:
    """MXSERVE_PREFILL_ROWS=1: a step with prefill chunks whose tokens all fit a bucket replays the
    decode graph with one row per token (a chunk's tokens at consecutive positions, as the
    speculative verify runs its drafts), instead of an eager forward. Each row computes what a
    one-token decode computes, which equals a prefill within the 1e-5 that chunking allows
    (tests/model/test_incremental.py), not bit for bit: so it is off by default, where graphs equal
    eager bit for bit. The H200 gates pass (greedy tokens equal, session 13); with
    MXSERVE_DECODE_MAX_ROWS=256 it cut serving TTFT at one stream 74.7 -> 9.9 ms (docs/benchmarks.md)."""
    mode = os.environ.get("MXSERVE_PREFILL_ROWS", "0")
    if mode not in ("0", "1"):
        raise ValueError(f"MXSERVE_PREFILL_ROWS={mode!r}: expected 0 or 1")
    return mode == "1"


NOT_CAPTURABLE = ("the model has no capturable decode path (no static-shape decode_forward, e.g. the "
                  "tensor-parallel ranks' stand-in)")


def bucket_for(batch_size: int, buckets: Sequence[int] = BUCKETS) -> int | None:
    """The smallest bucket >= batch_size; None when the batch is empty or above the largest."""
    if batch_size <= 0:
        return None
    return next((b for b in sorted(buckets) if b >= batch_size), None)


def buckets_up_to(batch_size: int, buckets: Sequence[int] = BUCKETS) -> tuple[int, ...]:
    """Every bucket a batch of 1 .. batch_size can land in (all of them when batch_size is above the
    largest: bigger batches run eager, or are split by the scheduler)."""
    top = bucket_for(batch_size, buckets) or max(buckets)
    return tuple(b for b in sorted(buckets) if b <= top)


@dataclass(frozen=True)
class CaptureReport:
    """What `LLMEngine.capture_graphs` made ready before traffic."""

    buckets: dict[str, tuple[int, ...]]  # graphed part ("decode"; "draft", "verify") → buckets captured
    unavailable: str | None  # why steps cannot replay graphs (they all run eager), or None
    seconds: float = 0.0

    def line(self) -> str:
        if not self.buckets and self.unavailable is None:
            return "CUDA graphs: nothing to capture (no graphed step on this engine)"
        parts = "; ".join(f"{part} buckets {', '.join(map(str, b)) or 'none'}" for part, b in self.buckets.items())
        if self.unavailable is not None:
            return f"CUDA graphs unavailable, steps run eager: {self.unavailable}" + (f" ({parts})" if parts else "")
        return f"CUDA graphs: captured {parts} in {self.seconds:.1f} s"


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
           buckets: Sequence[int] = BUCKETS, hooks_on: bool = False, unavailable: str | None = None,
           static_buffers: bool = False, prefill_rows: bool = False) -> GraphDecision:
    """Whether one step can replay a decode graph, and if not, exactly why (first reason that applies).

    `hooks_on`: an observer/verification hook is set (it must see every op: eager).
    `unavailable`: why graphs cannot run at all in this engine (no decode capacity, a failed sync
    probe or capture), once known. `static_buffers`: the runner runs the graphs' static-buffer path
    without capture on any device (`MXSERVE_DECODE_GRAPHS=1`, what the CPU tests exercise).
    `prefill_rows`: prefill chunks run as one decode row per token (`prefill_rows_enabled`); the
    bucket is then chosen by the step's tokens, not its chunks."""
    if enforce_eager:
        return GraphDecision(None, "enforce_eager=True")
    if device_type != "cuda" and not static_buffers:
        return GraphDecision(None, f"device is {device_type} (CUDA graphs need a CUDA device)")
    if not model_capturable:
        return GraphDecision(None, NOT_CAPTURABLE)
    if hooks_on:
        return GraphDecision(None, "an observer/verification hook is set (it needs the per-chunk eager forward)")
    if unavailable is not None:
        return GraphDecision(None, unavailable)
    if any(n != 1 for n in chunk_num_tokens):
        if not prefill_rows:
            return GraphDecision(None, "prefill chunk(s) in the step (only one-token decodes are captured)")
        tokens = sum(chunk_num_tokens)
        bucket = bucket_for(tokens, buckets)
        if bucket is None:
            return GraphDecision(None, f"a step of {tokens} tokens is above the largest bucket {max(buckets)} "
                                       "(prefill chunks as decode rows)")
        return GraphDecision(bucket, None)
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


class GraphUnavailable(RuntimeError):
    """A part that cannot be graphed: it syncs with the host in steady state, or its capture failed.
    The message says which part, why, and the innermost mxserve frame."""


class GraphCapturer:
    """Probe, warm up and capture zero-argument static-shape functions on one device, every graph
    in one shared memory pool (see the module docstring for why the probe is the second call)."""

    def __init__(self, device: torch.device | str, *, warmup_iters: int = 2) -> None:
        self.device = torch.device(device)
        self.warmup_iters = warmup_iters
        self._mempool = None

    def capture(self, fn: Callable[[], object], part: str) -> tuple[torch.cuda.CUDAGraph, object]:
        """(graph, the output buffers `fn` returned during capture); `part` names it in errors."""
        fn()  # one-time lazy work may sync here; a steady-state call must not
        previous = torch.cuda.get_sync_debug_mode()
        torch.cuda.set_sync_debug_mode("error")
        try:
            fn()
        except RuntimeError as e:
            raise GraphUnavailable(f"the {part} syncs with the host ({mxserve_frame(e)}): "
                                   f"{str(e).splitlines()[0]}") from e
        finally:
            torch.cuda.set_sync_debug_mode(previous)
        try:
            stream = torch.cuda.Stream(device=self.device)
            stream.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(stream):  # allocations, Triton compiles and autotuning outside the graph
                for _ in range(self.warmup_iters):
                    fn()
            torch.cuda.current_stream(self.device).wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            if self._mempool is None:
                self._mempool = torch.cuda.graph_pool_handle()
            with torch.cuda.graph(graph, pool=self._mempool):
                out = fn()
        except RuntimeError as e:
            raise GraphUnavailable(f"CUDA-graph capture of the {part} failed ({mxserve_frame(e)}): "
                                   f"{str(e).splitlines()[0]}") from e
        return graph, out


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
        self._capturer: GraphCapturer | None = None

    def captured_buckets(self) -> tuple[int, ...]:
        return tuple(sorted(self._graphs))

    def capture(self, bucket: int, example: torch.Tensor) -> None:
        """Capture `fn` on a static [bucket, ...] buffer shaped like `example`'s rows; raises
        `GraphUnavailable` when `fn` syncs with the host or the capture fails."""
        if example.device.type != "cuda":
            raise ValueError(f"GraphPool.capture: needs a CUDA tensor, got {example.device}")
        if self._capturer is None:
            self._capturer = GraphCapturer(example.device, warmup_iters=self.warmup_iters)
        static_in = pad_to_bucket(example[:bucket], bucket, self.pad_fill).clone()
        graph, static_out = self._capturer.capture(lambda: self.fn(static_in), "function")
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


@dataclass
class _DecodeGraph:
    static: DecodeBatch  # device buffers the graph reads
    host: DecodeBatch  # pinned host buffers filled each step
    copied: torch.cuda.Event | None  # the last host → static copy (the host buffers are reused after it)
    graph: torch.cuda.CUDAGraph | None  # None: run decode_forward on the static buffers (no capture)
    logits: torch.Tensor | None  # [bucket, vocab] the graph's output buffer


class DecodeGraphs:
    """`model.decode_forward` per bucket, captured on first use (see the module docstring).

    `capture=False` runs the same static-buffer path without graphs (what the CPU tests exercise:
    the staging, the padding and the row bookkeeping). `run` returns None when graphs are not
    available; `unavailable` then says why (set once, never retried)."""

    def __init__(self, model, state, geometry: DecodeGeometry, device: torch.device, *, capture: bool = True,
                 buckets: Sequence[int] = BUCKETS, warmup_iters: int = 2) -> None:
        self.model, self.state, self.geometry, self.device = model, state, geometry, device
        self.capture = capture
        self.buckets = tuple(sorted(buckets))
        self.unavailable: str | None = None
        self.num_replays = 0
        self.num_static_steps = 0  # steps run on the static buffers without capture (capture=False)
        self._graphs: dict[int, _DecodeGraph] = {}
        self._capturer = GraphCapturer(device, warmup_iters=warmup_iters)

    def captured_buckets(self) -> tuple[int, ...]:
        return tuple(sorted(b for b, g in self._graphs.items() if g.graph is not None))

    def prepare(self, bucket: int) -> bool:
        """Make `bucket` ready to run (captured, on CUDA); False, with `unavailable` set, when the
        decode forward cannot be graphed (set once, never retried)."""
        if self.unavailable is not None:
            return False
        if bucket in self._graphs:
            return True
        pin = self.device.type == "cuda"
        entry = _DecodeGraph(DecodeBatch.empty(bucket, self.geometry, device=self.device),
                             DecodeBatch.empty(bucket, self.geometry, pin_memory=pin), None, None, None)
        if self.capture:
            self.unavailable = self._capture(entry)
            if self.unavailable is not None:
                return False
        self._graphs[bucket] = entry
        return True

    def run(self, token_ids: Sequence[int] | torch.Tensor, seq_ids: Sequence, positions: Sequence[int], bucket: int
            ) -> torch.Tensor | None:
        """Logits [n, vocab] (fp32, on the device) of one decode step of n = len(token_ids) sequences.
        `token_ids` may be a device tensor (the previous step's sampled tokens, not yet read by the
        host: the decode lookahead): it is copied into the static buffer on the stream, after the
        host batch, so nothing waits for it."""
        if not self.prepare(bucket):
            return None
        fed = token_ids if isinstance(token_ids, torch.Tensor) else None
        if fed is not None:
            token_ids = [0] * len(seq_ids)  # placeholders: the host batch checks and pads them
        entry = self._graphs[bucket]
        if entry.copied is not None:
            entry.copied.synchronize()  # the previous step's copy has read the pinned buffers
        build_decode_batch(token_ids, seq_ids, positions, self.state, self.geometry, num_rows=bucket, out=entry.host)
        entry.static.copy_(entry.host)
        if fed is not None:
            entry.static.token_ids[: len(seq_ids)].copy_(fed, non_blocking=True)
        if self.device.type == "cuda":
            entry.copied = torch.cuda.Event()
            entry.copied.record()
        if entry.graph is None:
            self.num_static_steps += 1
            return self.model.decode_forward(entry.static, self.state, self.geometry)[: len(token_ids)]
        entry.graph.replay()
        self.num_replays += 1
        return entry.logits[: len(token_ids)]

    def replay_device_seconds(self, bucket: int, *, replays: int, rounds: int) -> list[float] | None:
        """Device seconds per replay of `bucket`'s captured graph, one value per round of `replays`
        back-to-back replays timed by CUDA events (no host batch building between them, so the host
        cannot hide in the figure). None when the bucket has no captured graph. Replays repeat the
        last step's inputs: the same work (a decode step rewrites the same slots)."""
        entry = self._graphs.get(bucket)
        if entry is None or entry.graph is None or self.device.type != "cuda":
            return None
        seconds = []
        for _ in range(rounds):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(replays):
                entry.graph.replay()
            end.record()
            end.synchronize()
            seconds.append(start.elapsed_time(end) / 1e3 / replays)
        self.num_replays += replays * rounds
        return seconds

    def _capture(self, entry: _DecodeGraph) -> str | None:
        """Capture `entry`'s bucket on its all-padding static buffers: None, or why the decode forward
        cannot be graphed."""
        try:
            entry.graph, entry.logits = self._capturer.capture(
                lambda: self.model.decode_forward(entry.static, self.state, self.geometry), "decode forward")
        except GraphUnavailable as e:
            return str(e)
        logger.info("CUDA graphs: captured the decode forward for bucket %d (geometry: max_positions %d, "
                    "block size %d)", entry.static.num_rows, self.geometry.max_positions, self.geometry.block_size)
        return None


def mxserve_frame(error: BaseException) -> str:
    """The innermost mxserve frame of an exception's traceback, 'path:line in function'."""
    frames = [f for f in traceback.extract_tb(error.__traceback__) if "mxserve" in f.filename]
    if not frames:
        return "outside mxserve"
    f = frames[-1]
    return f"{f.filename.split('src/')[-1]}:{f.lineno} in {f.name}"
