"""ModelRunner: one scheduled step → one model forward → sampled tokens (and logprobs).

It turns a `SchedulerOutput` into the model's typed `ForwardBatch` (one chunk per request, the
block manager's page tables installed in the caches), runs `DeepseekV4Model.forward`, and samples
one token for every chunk that reached the end of its sequence. Sampling is keyed by (request
seed, absolute position of the new token), so a request's tokens do not depend on the batch it
runs in, nor on a preemption that recomputes it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch

from mxserve.engine.cuda_graphs import (
    BUCKETS,
    CaptureReport,
    DecodeGraphs,
    EagerStats,
    GraphDecision,
    buckets_up_to,
    decide,
    decode_buckets_from_env,
    prefill_rows_enabled,
    static_decode_buffers,
)
from mxserve.engine.decode_lookahead import (
    Lookahead,
    LookaheadStats,
    lookahead_enabled,
    next_positions_covered,
)
from mxserve.engine.logprobs import LogprobsTensors, PositionLogprobs, compute_logprobs, gather_logprobs
from mxserve.engine.sampler import Sampler
from mxserve.engine.sampling_params import SamplingParams
from mxserve.engine.scheduler_output import RunnerOutput, ScheduledChunk, SchedulerOutput
from mxserve.model.decode_batch import DecodeGeometry
from mxserve.model.deepseek_v4 import DeepseekV4Model
from mxserve.model.forward_batch import ForwardBatch
from mxserve.model.kv_state import ModelCacheState, Pool, positions_per_unit

# the eager-step reason of a step whose decodes replayed a graph beside eager prefill chunks
SPLIT_STEP = "prefill chunks ran eager beside the graphed decodes"


@dataclass(frozen=True)
class RequestSampling:
    """What the runner needs to know about a request beyond its tokens."""

    params: SamplingParams
    seed: int  # this sample's seed (drawn once per request when none was given)
    prompt_token_ids: tuple[int, ...]
    wants_prompt_logprobs: bool  # still to be reported (False once delivered)

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)


@dataclass
class StepResult:
    runner_output: RunnerOutput  # sampled token per request that reached its sequence end
    sampled_logprobs: dict[str, PositionLogprobs] = field(default_factory=dict)  # when params.logprobs is set
    prompt_logprobs: dict[str, list[PositionLogprobs]] = field(default_factory=dict)  # rows of this chunk, per request
    logits_finite: bool = True  # False when any computed logit row held NaN/inf

    def merged(self, other: StepResult) -> StepResult:
        """This result and `other`'s, of disjoint requests (two parts of one step), as one."""
        return StepResult(
            RunnerOutput({**self.runner_output.sampled_token_ids, **other.runner_output.sampled_token_ids}),
            sampled_logprobs={**self.sampled_logprobs, **other.sampled_logprobs},
            prompt_logprobs={**self.prompt_logprobs, **other.prompt_logprobs},
            logits_finite=self.logits_finite and other.logits_finite)


class ModelRunner:
    def __init__(self, model: DeepseekV4Model, cache_state: ModelCacheState, device: torch.device, *,
                 enforce_eager: bool = False, max_model_len: int | None = None) -> None:
        """`max_model_len`: the decode capacity CUDA graphs are captured against (`DecodeGeometry`);
        None = no graphs (every step eager, with that reason)."""
        self.model = model
        self.cache_state = cache_state
        self.device = device
        self.sampler = Sampler()
        self.enforce_eager = enforce_eager  # EngineConfig.enforce_eager: never try CUDA-graph decode
        self.eager_stats = EagerStats()  # steps that ran eager, per reason (mxserve.engine.cuda_graphs)
        self.decode_graphs: DecodeGraphs | None = None  # graphs per bucket, captured on first use
        # request id → the block manager's table view last installed in `cache_state`: the manager
        # hands out the same read-only view until a table grows, so most decode steps install nothing
        self._installed_tables: dict[str, Mapping[str, tuple[int, ...]]] = {}
        # the decode lookahead (mxserve.engine.decode_lookahead): the step launched ahead, if any
        self._ahead: Lookahead | None = None
        self._bucket: int | None = None  # the bucket the last graph step replayed
        self._token_host: torch.Tensor | None = None  # pinned: the sampled tokens read past the lookahead
        self.lookahead_stats = LookaheadStats()
        self._positions_per_unit: dict[str, int] | None = None  # pool name → positions a cache unit covers
        self.static_decode = static_decode_buffers()  # the static-buffer path off CUDA too (tests)
        self.prefill_rows = prefill_rows_enabled()  # prefill chunks as decode rows of the graph (opt-in)
        self.num_prefill_row_steps = 0  # steps with prefill chunks that replayed the decode graph
        if max_model_len is not None and getattr(model, "supports_cuda_graphs", False) and not enforce_eager:
            geometry = DecodeGeometry.for_positions(model.config, cache_state.block_size, max_model_len)
            self.decode_graphs = DecodeGraphs(model, cache_state, geometry, device, capture=device.type == "cuda",
                                              buckets=decode_buckets_from_env())

    def capture_graphs(self, max_batch: int, max_rows: int = 0) -> CaptureReport:
        """Capture the decode graph of every bucket a batch of up to `max_batch` requests uses — or, with
        prefill rows, a step of up to `max_rows` tokens (the step budget) — ahead of traffic
        (`LLMEngine.capture_graphs`); nothing where decode steps do not replay graphs."""
        graphs = self.decode_graphs
        if graphs is None or not graphs.capture:
            return CaptureReport({}, None)
        for bucket in buckets_up_to(max(max_batch, max_rows if self.prefill_rows else 0), graphs.buckets):
            if not graphs.prepare(bucket):
                break
        return CaptureReport({"decode": graphs.captured_buckets()}, graphs.unavailable)

    def release(self, request_ids) -> None:
        """Forget finished, aborted or preempted requests' tables (the block manager owns the pages)."""
        for request_id in request_ids:
            self.cache_state.free_sequence(request_id)
            self._installed_tables.pop(request_id, None)

    def execute(self, step: SchedulerOutput, sampling: Mapping[str, RequestSampling]) -> StepResult:
        self.release(step.finished_request_ids | step.preempted_request_ids)
        if not step.chunks:
            return StepResult(RunnerOutput({}))
        decodes = tuple(c for c in step.chunks if c.num_tokens == 1)
        # split unless the whole step replays (prefill rows); without them a mixed step never does
        if (decodes and len(decodes) < len(step.chunks)
                and (not self.prefill_rows or self._decision(step.chunks).is_eager)
                and not self._decision(decodes).is_eager):
            return self._split_step(step, decodes, sampling)
        rows: list[int] = []
        sample_rows: dict[str, int] = {}  # request id → index into `rows`
        prompt_rows: dict[str, tuple[int, int]] = {}  # request id → (first index into rows, count)
        end_pos: dict[str, int] = {}  # request id → its chunk's end (the position of the token it samples)
        installed = self._installed_tables
        offset = 0
        for chunk in step.chunks:
            rid = chunk.request_id
            end_pos[rid] = chunk.start_pos + chunk.num_tokens
            if chunk.is_new:
                self.cache_state.free_sequence(rid)
                installed.pop(rid, None)
            if installed.get(rid) is not chunk.block_tables:
                self.cache_state.set_block_tables(rid, chunk.block_tables)
                installed[rid] = chunk.block_tables
            info = sampling[chunk.request_id]
            # rows that predict prompt tokens 1 .. num_prompt - 1 (prompt logprobs, first run only)
            last_prompt_row = min(chunk.end_pos, info.num_prompt_tokens - 1)
            if info.wants_prompt_logprobs and chunk.start_pos < last_prompt_row:
                prompt_rows[chunk.request_id] = (len(rows), last_prompt_row - chunk.start_pos)
                rows.extend(range(offset, offset + last_prompt_row - chunk.start_pos))
            if chunk.samples_next_token:
                if rows and rows[-1] == offset + chunk.num_tokens - 1:
                    sample_rows[chunk.request_id] = len(rows) - 1
                else:
                    sample_rows[chunk.request_id] = len(rows)
                    rows.append(offset + chunk.num_tokens - 1)
            offset += chunk.num_tokens

        ahead, self._ahead = self._ahead, None
        logits = None
        if ahead is not None:
            if ahead.matches(step):
                self.lookahead_stats.used += 1
                logits, self._bucket = _select_rows(ahead.logits, rows), ahead.bucket
            else:
                self.lookahead_stats.dropped += 1
        if logits is None:
            logits = self._graph_decode(step, rows)
        graph_step = logits is not None
        if logits is None:
            batch = ForwardBatch.from_chunks(
                [list(c.token_ids) for c in step.chunks], [c.request_id for c in step.chunks],
                [c.start_pos for c in step.chunks], logits_for=rows, device=self.device,
            )
            # Always run the forward, even when no row needs logits: a lone mid-prompt chunk must still
            # fill the caches (skipping it silently corrupted chunked prefill of a single long prompt).
            logits = self.model.forward(batch, self.cache_state)
        result = StepResult(RunnerOutput({}))
        if not rows:
            return result
        # Read back once per step: the finiteness flag travels with the sampled tokens (each host
        # read of a device value waits for everything queued before it; a decode step read three).
        finite = torch.isfinite(logits).all()
        if not sample_rows:
            result.logits_finite = bool(finite)
        else:
            ids = list(sample_rows)
            picked = _select_rows(logits, [sample_rows[i] for i in ids])
            infos = [sampling[i] for i in ids]
            positions = [end_pos[i] for i in ids]
            out = self.sampler.sample(
                picked, [info.params for info in infos], [info.seed for info in infos], positions,
                banned=[self._banned_ids(info, position) for info, position in zip(infos, positions, strict=True)],
            )
            packed = torch.cat((out.token_ids, finite.to(torch.int64)[None]))
            if graph_step and out.top_logprobs is None and not prompt_rows:
                *tokens, is_finite = self._read_past_lookahead(packed, step, out.token_ids, sampling)
            else:
                *tokens, is_finite = packed.tolist()
            result.logits_finite = bool(is_finite)
            result.runner_output = RunnerOutput({rid: (tok,) for rid, tok in zip(ids, tokens, strict=True)})
            if out.top_logprobs is not None:
                wanted = [sampling[i].params.logprobs or 0 for i in ids]
                for rid, record in zip(ids, out.top_logprobs.to_positions(wanted), strict=True):
                    if sampling[rid].params.logprobs is not None:
                        result.sampled_logprobs[rid] = record
        for rid, (first, count) in prompt_rows.items():
            start = step.chunk_of(rid).start_pos
            # row at position p predicts prompt token p + 1 (which may sit in the next chunk)
            targets = torch.tensor(sampling[rid].prompt_token_ids[start + 1 : start + 1 + count], dtype=torch.int64,
                                   device=logits.device)
            lp = compute_logprobs(logits[first : first + count])
            tensors: LogprobsTensors = gather_logprobs(lp, targets, sampling[rid].params.prompt_logprobs or 0)
            result.prompt_logprobs[rid] = tensors.to_positions()
        return result

    def _split_step(self, step: SchedulerOutput, decodes: tuple[ScheduledChunk, ...],
                    sampling: Mapping[str, RequestSampling]) -> StepResult:
        """A step whose prefill chunks joined the decodes (continuous batching): the decodes replay
        their graph and only the prefill chunks run eager, instead of the whole step eager (the
        requests share no cache slot, and every op is batch invariant: the same tokens). A decode
        lookahead launched by the decode part is kept for the next step."""
        self.eager_stats.record(SPLIT_STEP)
        result = self.execute(step.restricted_to(decodes), sampling)
        ahead, self._ahead = self._ahead, None
        prefills = tuple(c for c in step.chunks if c.num_tokens != 1)
        result = result.merged(self.execute(step.restricted_to(prefills), sampling))
        self._ahead = ahead
        return result

    def _decision(self, chunks) -> GraphDecision:
        graphs = self.decode_graphs
        return decide(
            [c.num_tokens for c in chunks], enforce_eager=self.enforce_eager, device_type=self.device.type,
            model_capturable=getattr(self.model, "supports_cuda_graphs", False),
            hooks_on=getattr(self.model, "observer", None) is not None,
            unavailable="no decode capacity (max_model_len) was given to the runner" if graphs is None
            else graphs.unavailable, static_buffers=self.static_decode, prefill_rows=self.prefill_rows,
            buckets=BUCKETS if graphs is None else graphs.buckets,
        )

    def _graph_decode(self, step: SchedulerOutput, rows: list[int]) -> torch.Tensor | None:
        """Logits of `rows` from a replayed decode graph, or None (the step runs eager; the reason is
        recorded: logged once, counted in `eager_stats`)."""
        graphs = self.decode_graphs
        decision = self._decision(step.chunks)
        logits = None
        self._bucket = decision.bucket
        if not decision.is_eager:
            chunks = step.chunks
            if self.prefill_rows and any(c.num_tokens != 1 for c in chunks):
                logits = graphs.run(*_token_rows(chunks), decision.bucket)
                self.num_prefill_row_steps += logits is not None
            else:
                logits = graphs.run([c.token_ids[0] for c in chunks], [c.request_id for c in chunks],
                                    [c.start_pos for c in chunks], decision.bucket)
        if logits is None:
            self.eager_stats.record(decision.reason if decision.is_eager else graphs.unavailable)
            return None
        return _select_rows(logits, rows)

    def _read_past_lookahead(self, packed: torch.Tensor, step: SchedulerOutput, token_ids: torch.Tensor,
                             sampling: Mapping[str, RequestSampling]) -> list[int]:
        """`packed`'s values, with the next decode step launched behind them when it can be
        predicted (`mxserve.engine.decode_lookahead`): reading them waits for this step only."""

        def launch() -> None:
            self._ahead = self._launch_lookahead(step, token_ids, sampling)

        values = self._read_behind(packed, launch)
        if self._ahead is not None:
            self._ahead.token_ids = tuple(values[:-1])
        return values

    def _read_behind(self, values: torch.Tensor, queue: Callable[[], None]) -> list[int]:
        """values.tolist(), with `queue()`'s device work enqueued after the values' copy to pinned
        memory and an event, before the host waits (CUDA): the read does not wait for that work."""
        if self.device.type != "cuda":
            queue()
            return values.tolist()
        host = self._token_host
        if host is None or host.numel() < values.numel():
            host = self._token_host = torch.empty(max(values.numel(), 512), dtype=torch.int64, pin_memory=True)
        host = host[: values.numel()]
        host.copy_(values, non_blocking=True)
        copied = torch.cuda.Event()
        copied.record()
        queue()
        copied.synchronize()
        return host.tolist()

    def _launch_lookahead(self, step: SchedulerOutput, token_ids: torch.Tensor,
                          sampling: Mapping[str, RequestSampling]) -> Lookahead | None:
        """Replay the next decode step of this step's requests, fed `token_ids` on the device, when
        that step can be predicted (module docstring of `decode_lookahead`); None otherwise."""
        graphs, bucket = self.decode_graphs, self._bucket
        if not lookahead_enabled() or graphs is None or graphs.unavailable is not None or bucket is None:
            return None
        chunks = step.chunks
        max_positions = graphs.geometry.max_positions
        for chunk in chunks:
            if chunk.num_tokens != 1 or not chunk.samples_next_token or chunk.num_draft_tokens:
                return None
            info = sampling[chunk.request_id]
            num_output = chunk.end_pos + 1 - info.num_prompt_tokens  # output tokens once this step's is appended
            max_tokens = info.params.max_tokens
            if (max_tokens is not None and num_output >= max_tokens) or chunk.end_pos + 2 > max_positions:
                return None  # the request ends at this step (or nearly): the next step will differ
        tables = tuple(c.block_tables for c in chunks)
        positions = tuple(c.end_pos for c in chunks)
        if self._positions_per_unit is None:
            self._positions_per_unit = {pool.value: positions_per_unit(self.model.config, pool) for pool in Pool}
        if not next_positions_covered(tables, positions, self.cache_state.block_size, self._positions_per_unit):
            return None
        logits = graphs.run(token_ids, [c.request_id for c in chunks], list(positions), bucket)
        if logits is None:
            return None
        self.lookahead_stats.launched += 1
        return Lookahead(tuple(c.request_id for c in chunks), positions, tables, logits, bucket)

    def _banned_ids(self, info: RequestSampling, next_position: int) -> tuple[int, ...]:
        """min_tokens: EOS and the stop token ids are held back until that many output tokens exist."""
        num_output = next_position - info.num_prompt_tokens  # output tokens before the one sampled now
        if num_output >= info.params.min_tokens:
            return ()
        return (self.model.config.eos_token_id, *info.params.stop_token_ids)


def _token_rows(chunks) -> tuple[list[int], list[str], list[int]]:
    """(token ids, request ids, positions) with one row per token: each chunk's tokens at consecutive
    positions, in chunk order (the rows `execute` numbers its logits rows by)."""
    token_ids, seq_ids, positions = [], [], []
    for c in chunks:
        token_ids.extend(c.token_ids)
        seq_ids.extend([c.request_id] * c.num_tokens)
        positions.extend(range(c.start_pos, c.start_pos + c.num_tokens))
    return token_ids, seq_ids, positions


def _select_rows(logits: torch.Tensor, rows: list[int]) -> torch.Tensor:
    """logits[rows]. Consecutive rows (every decode step) are a slice: no index tensor to copy to
    the device, a copy that waits for the step. The slice may alias a captured graph's output
    buffer; callers finish with it before the next step replays the graph."""
    if not rows:
        return logits[:0]
    first = rows[0]
    if rows == list(range(first, first + len(rows))):
        return logits[first : first + len(rows)]
    return logits[torch.tensor(rows, dtype=torch.int64, device=logits.device)]
