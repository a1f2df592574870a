"""LLMEngine: the synchronous engine core — requests in, incremental outputs out, one step at a time.

Start-up loads the checkpoint (memory-mapped, progress bar), the tokenizer when the checkpoint
ships one, builds the reference model, sizes the caches from the memory budget and prints one
line saying how many pages and tokens fit. Each `step()`: the scheduler picks chunks under the
token budget, the model runner computes them and samples, the scheduler appends tokens and
decides EOS/length stops, the detokenizer turns tokens into text and decides stop strings.
"""

from __future__ import annotations

import copy
import logging
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from mxserve.config import ConfigError
from mxserve.config.engine_config import EngineConfig
from mxserve.config.scheduler_config import SchedulerConfig
from mxserve.config.speculative_config import SpeculativeConfig
from mxserve.distributed import (
    DistributedExecutor,
    ParallelConfig,
    RemoteCacheState,
    RemoteModel,
    ShardingPlan,
    WorkerSpec,
    log_rank_kernel_choices,
)
from mxserve.engine.block_manager import BlockManager
from mxserve.engine.cache_sizing import CachePlan, plan_cache
from mxserve.engine.cuda_graphs import CaptureReport
from mxserve.engine.detokenizer import IncrementalDetokenizer
from mxserve.engine.engine_client import EngineStats
from mxserve.engine.engine_info import EngineInfo, encode_prompt
from mxserve.engine.model_runner import ModelRunner, RequestSampling
from mxserve.engine.outputs import CompletionOutput, RequestMetrics, RequestOutput, TokenLogprobs
from mxserve.engine.request import FinishReason, Request
from mxserve.engine.sampling_params import SamplingParams, request_seeds
from mxserve.engine.scheduler import Scheduler
from mxserve.engine.speculative import SpecDecodeStats, SpeculativeModelRunner
from mxserve.engine.tokenizer import Tokenizer
from mxserve.kernels.chooser import ALL_TRITON
from mxserve.model.checkpoint import CheckpointReader
from mxserve.model.dspark import DraftWindows, DSparkDraft
from mxserve.model.kernel_selection import RESIDENT_LIMIT_BYTES, build_engine_model, resolve_overrides
from mxserve.model.kv_state import ModelCacheState
from mxserve.model.numerics import NumericPolicy

logger = logging.getLogger("mxserve.engine")

_CPU_DEFAULT_CACHE_BYTES = 1 << 30  # 1 GiB of caches on the CPU unless told otherwise


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={name!r} asked for, but torch sees no CUDA device")
    return device


def resolve_model_dir(model: str | None) -> Path:
    if model is None:
        from mxserve import default_model_path

        return Path(default_model_path())
    path = Path(model)
    if not path.is_dir():
        raise ConfigError(f"model directory {path} does not exist")
    return path


@dataclass
class _Sample:
    """One of a request's n samples, as the engine tracks it."""

    sampling: RequestSampling
    detokenizer: IncrementalDetokenizer | None
    output: CompletionOutput
    finished: bool = False


@dataclass
class _Tracked:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    params: SamplingParams
    samples: dict[str, _Sample]  # scheduler request id → sample
    metrics: RequestMetrics
    prompt_logprobs: list[TokenLogprobs | None] = field(default_factory=list)

    @property
    def finished(self) -> bool:
        return all(s.finished for s in self.samples.values())

    def snapshot(self, finished: bool | None = None) -> RequestOutput:
        """`finished`: self.finished when the caller has just computed it (None: compute it)."""
        outputs = [s.output for s in self.samples.values()]
        return RequestOutput(
            self.request_id, self.prompt, self.prompt_token_ids, outputs,
            self.finished if finished is None else finished, self.metrics, self.prompt_logprobs or None,
        )


class LLMEngine:
    def __init__(self, config: EngineConfig, *, progress: bool = True) -> None:
        self.config = config
        self.device = resolve_device(config.device)
        model_dir = resolve_model_dir(config.model)
        reader = CheckpointReader(model_dir)
        self.model_config = reader.config
        self.executor: DistributedExecutor | None = None
        if config.tensor_parallel_size > 1 or config.enable_expert_parallel:
            self._init_distributed(reader, model_dir, progress)
            return
        weights = reader.load(progress=progress and sys.stderr.isatty())
        if self.device.type != "cpu":
            weights = {name: w.to(self.device) for name, w in weights.items()}
        self.tokenizer = Tokenizer.from_dir(model_dir) if (model_dir / "tokenizer.json").exists() else None
        max_model_len = min(config.max_model_len, self.model_config.max_position_embeddings)
        self.max_model_len = max_model_len
        # linear, MoE and attention backends (reference unless forced), chosen once and logged with
        # reasons, in the one function `mxserve bench layers` also builds its model with
        self.kernel_overrides = resolve_overrides(config.kernel_overrides)
        self.model, linear_backend = build_engine_model(
            self.model_config, weights, device=self.device, numerics=config.numerics,
            kv_cache_dtype=config.kv_cache_dtype, overrides=self.kernel_overrides, max_model_len=max_model_len)
        self._set_cpu_threads(small_model=linear_backend == "reference-resident")
        self.num_speculative_tokens = speculative_k(config.speculative_config, self.model_config)
        self.cache_plan: CachePlan = plan_cache(
            self.model_config, self.model.policy, budget_bytes=self._cache_budget(), block_size=config.block_size,
            max_num_seqs=config.max_num_seqs, max_model_len=max_model_len,
            extra_window_layers=self.model_config.dspark.num_stages if self.num_speculative_tokens else 0,
        )
        cache_state = ModelCacheState(self.model_config, self.model.policy, num_blocks=self.cache_plan.num_blocks,
                                      block_size=config.block_size, manage_tables=False, device=self.device)
        self.runner = self._build_runner(weights, cache_state, linear_backend == "reference-resident")
        self.scheduler = Scheduler(
            SchedulerConfig(max_model_len=max_model_len, max_num_batched_tokens=config.max_num_batched_tokens,
                            long_prefill_token_threshold=config.long_prefill_token_threshold,
                            max_num_seqs=config.max_num_seqs, num_speculative_tokens=self.num_speculative_tokens,
                            max_verify_rows=getattr(self.runner, "max_verify_rows", 0)),
            BlockManager(self.cache_plan.pool_specs),
        )
        self._requests: dict[str, _Tracked] = {}
        self._sample_owner: dict[str, str] = {}  # scheduler request id → user request id
        self._seed_rng = random.Random(config.seed)
        logger.info("%s (%s numerics, device %s)", self.cache_plan.startup_line(), config.numerics, self.device)

    def _init_distributed(self, reader: CheckpointReader, model_dir: Path, progress: bool) -> None:
        """Tensor/expert parallelism (docs/parallelism.md): one process per rank loads its shards; the
        scheduler, sampler and detokenizer stay here, in the driver."""
        config = self.config
        if config.speculative_config is not None:
            raise ValueError("speculative decoding does not run with tensor_parallel_size > 1 or expert parallelism yet")
        overrides = self.kernel_overrides = resolve_overrides(config.kernel_overrides)  # the ranks get the result
        parallel = ParallelConfig(config.tensor_parallel_size, config.enable_expert_parallel)
        ShardingPlan.build(reader.config, parallel)  # a config that cannot split fails here, before any process
        reader.validate(progress=progress and sys.stderr.isatty())  # once, in the driver; ranks only map shards
        self.tokenizer = Tokenizer.from_dir(model_dir) if (model_dir / "tokenizer.json").exists() else None
        inventory = reader.inventory
        num_params = sum(s.out_features * s.in_features for s in inventory.linears.values())
        # as in one process: resident decoded linears for small CPU models unless a linear backend is forced
        resident = (self.device.type == "cpu" and 8 * num_params <= RESIDENT_LIMIT_BYTES
                    and "linear" not in overrides)
        threads = config.cpu_threads or (1 if resident else None)
        max_model_len = min(config.max_model_len, self.model_config.max_position_embeddings)
        spec = WorkerSpec(str(model_dir), parallel, config.numerics, config.kv_cache_dtype, resident,
                          self.device.type, threads, tuple(sorted(overrides.items())), max_model_len)
        self.executor = DistributedExecutor.start(spec)
        for r in self.executor.reports:
            logger.info("rank %d (%s): %.1f MiB of weight shards, %.1f MiB resident", r.rank, r.device,
                        r.weight_bytes / 2**20, r.resident_bytes / 2**20)
        logger.info("%s", self.executor.reports[0].plan)
        log_rank_kernel_choices(self.executor.reports)
        self.model = RemoteModel(reader.config, NumericPolicy.for_mode(config.numerics, config.kv_cache_dtype),
                                 self.executor)
        self.max_model_len = min(config.max_model_len, self.model_config.max_position_embeddings)
        self.num_speculative_tokens = 0
        free = [r.free_device_bytes for r in self.executor.reports if r.free_device_bytes is not None]
        budget = config.kv_cache_memory or (int(min(free) * config.gpu_memory_utilization) if free
                                            else _CPU_DEFAULT_CACHE_BYTES)
        self.cache_plan = plan_cache(self.model_config, self.model.policy, budget_bytes=budget,
                                     block_size=config.block_size, max_num_seqs=config.max_num_seqs,
                                     max_model_len=self.max_model_len)
        self.executor.init_caches(self.cache_plan.num_blocks, config.block_size, manage_tables=False)
        self.scheduler = Scheduler(
            SchedulerConfig(max_model_len=self.max_model_len, max_num_batched_tokens=config.max_num_batched_tokens,
                            long_prefill_token_threshold=config.long_prefill_token_threshold,
                            max_num_seqs=config.max_num_seqs),
            BlockManager(self.cache_plan.pool_specs),
        )
        self.runner = ModelRunner(self.model, RemoteCacheState(), torch.device("cpu"))  # logits arrive on the CPU
        self._requests, self._sample_owner = {}, {}
        self._seed_rng = random.Random(config.seed)
        logger.info("%s (%s numerics, %d ranks on %s, every rank holds these caches)", self.cache_plan.startup_line(),
                    config.numerics, parallel.tensor_parallel_size, self.device.type)

    def close(self) -> None:
        """Stop the rank processes of a parallel engine (idempotent; nothing to do in one process)."""
        if self.executor is not None:
            self.executor.close()

    def _build_runner(self, weights, cache_state: ModelCacheState, resident: bool) -> ModelRunner:
        """The plain runner, or the speculative one with the DSpark draft and its stage windows."""
        spec = self.config.speculative_config
        if not self.num_speculative_tokens:
            return ModelRunner(self.model, cache_state, self.device, enforce_eager=self.config.enforce_eager,
                               max_model_len=self.max_model_len)
        draft = DSparkDraft.for_target(self.model, weights, resident_weights=resident)
        windows = DraftWindows(self.model_config, self.model.policy, num_blocks=self.cache_plan.num_blocks["window"],
                               block_size=self.config.block_size, device=self.device)
        logger.info("speculative decoding: %s, K=%d, %s drafts, %s verification", spec.method,
                    self.num_speculative_tokens, spec.draft_sample_method, spec.rejection_sample_method)
        return SpeculativeModelRunner(self.model, cache_state, self.device, draft=draft, windows=windows, config=spec,
                                      block_width=self.num_speculative_tokens, max_model_len=self.max_model_len,
                                      enforce_eager=self.config.enforce_eager)

    def capture_graphs(self) -> CaptureReport:
        """Capture every CUDA graph a batch of up to max_num_seqs requests (or, with prefill rows, a step
        of up to max_num_batched_tokens tokens) can replay, now rather than on first use: a capture
        takes ~0.1-0.3 s, which in the middle of serving stalls every running request (`mxserve serve`
        calls this at start-up). Logs and returns what was captured; where steps cannot replay graphs
        (CPU, enforce_eager, syncing kernels) it says why."""
        start = time.perf_counter()
        report = self.runner.capture_graphs(self.config.max_num_seqs, max_rows=self.config.max_num_batched_tokens)
        report = CaptureReport(report.buckets, report.unavailable, time.perf_counter() - start)
        logger.info("%s", report.line())
        on_reference = sorted(op for op in ALL_TRITON if self.kernel_overrides.get(op, "reference") == "reference")
        if report.unavailable is not None and on_reference:
            logger.warning("decode steps will run eager on %s: the reference kernels of %s sync with the host; "
                           "--kernel-overrides all-triton (or MXSERVE_KERNEL_OVERRIDES=all-triton) selects the "
                           "graph-safe Triton kernels", self.device, ", ".join(on_reference))
        return report

    @property
    def spec_decode_stats(self) -> SpecDecodeStats | None:
        """Draft tokens proposed/accepted and mean acceptance length; None without speculation."""
        return self.runner.stats if isinstance(self.runner, SpeculativeModelRunner) else None

    def stats(self) -> EngineStats:
        """Running / waiting requests and cache use now; num_pending counts the requests this engine
        still tracks; the speculative counters are a copy."""
        scheduler = self.scheduler.stats()
        spec = self.spec_decode_stats
        return EngineStats(scheduler.num_running, scheduler.num_waiting, len(self._requests), scheduler.cache_usage,
                           self.scheduler.block_manager.is_all_free(), None if spec is None else copy.deepcopy(spec))

    def _set_cpu_threads(self, *, small_model: bool) -> None:
        """Small models on the CPU run dispatch-bound ops where a second OpenMP thread only adds
        spinning: measured on the 2-core machine under load, 1 thread decodes the default model at
        5.8 tok/s and 2 threads at 0.7 tok/s. Results are identical either way (fp64 reference)."""
        if self.device.type != "cpu":
            return
        threads = self.config.cpu_threads or (1 if small_model else None)
        if threads is not None:
            torch.set_num_threads(threads)
        logger.info("CPU threads: %d", torch.get_num_threads())

    def _cache_budget(self) -> int:
        if self.config.kv_cache_memory is not None:
            return self.config.kv_cache_memory
        if self.device.type == "cuda":
            free, _ = torch.cuda.mem_get_info(self.device)
            return int(free * self.config.gpu_memory_utilization)
        return _CPU_DEFAULT_CACHE_BYTES

    # ------------------------------------------------------------------ requests
    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        return (self.model_config.eos_token_id,)

    def encode_prompt(self, prompt: str | Sequence[int]) -> tuple[str | None, list[int]]:
        """Text prompts get BOS + the tokenizer's ids (as HF's default encode does for DeepSeek)."""
        return encode_prompt(prompt, self.tokenizer, self.model_config)

    @property
    def info(self) -> EngineInfo:
        """What a front (the HTTP server) needs without the weights: config, context limit, tokenizer."""
        return EngineInfo(self.model_config, self.max_model_len, self.tokenizer)

    def add_request(self, request_id: str, prompt: str | Sequence[int], params: SamplingParams) -> None:
        """Queue a request; ValueError (nothing queued) for an empty or overlong prompt or a duplicate id."""
        if request_id in self._requests:
            raise ValueError(f"request id {request_id!r} is already in use")
        if params.min_tokens and self.config.speculative_config is not None:
            raise ValueError("min_tokens is not supported with speculative decoding (a draft could propose EOS "
                             "before min_tokens); send min_tokens=0 or serve without --speculative-config")
        text, ids = self.encode_prompt(prompt)
        if len(ids) >= self.max_model_len:
            raise ValueError(
                f"prompt has {len(ids)} tokens; max_model_len={self.max_model_len} leaves no room to generate"
            )
        max_tokens = min(params.max_tokens, self.max_model_len - len(ids))
        seeds = request_seeds(params, rng=self._seed_rng) if params.seed is None else request_seeds(params)
        tracked = _Tracked(request_id, text, ids, params, {}, RequestMetrics(time.monotonic()))
        new_requests = []
        for index, seed in enumerate(seeds):
            sub_id = request_id if params.n == 1 else f"{request_id}#{index}"
            stop = params.stop_criteria(self.eos_token_ids)
            if max_tokens != params.max_tokens:
                stop = type(stop)(max_tokens=max_tokens, eos_token_ids=stop.eos_token_ids,
                                  stop_token_ids=stop.stop_token_ids, ignore_eos=stop.ignore_eos)
            detok = None
            if self.tokenizer is not None:
                detok = IncrementalDetokenizer(
                    self.tokenizer, skip_special_tokens=params.skip_special_tokens, stop=tuple(params.stop),
                    include_stop_str_in_output=params.include_stop_str_in_output, context_ids=ids[-8:],
                )
            sampling = RequestSampling(params, seed, tuple(ids), wants_prompt_logprobs=params.prompt_logprobs is not None
                                       and index == 0)
            tracked.samples[sub_id] = _Sample(sampling, detok, CompletionOutput(index, "", [],
                                              logprobs=[] if params.logprobs is not None else None,
                                              cumulative_logprob=0.0 if params.logprobs is not None else None))
            new_requests.append(Request(sub_id, tuple(ids), stop))
        for request in new_requests:
            self.scheduler.add_request(request)
            self._sample_owner[request.request_id] = request_id
        self._requests[request_id] = tracked

    def abort_request(self, request_id: str) -> bool:
        tracked = self._requests.pop(request_id, None)
        if tracked is None:
            return False
        for sub_id, sample in tracked.samples.items():
            self.scheduler.abort_request(sub_id)
            self._sample_owner.pop(sub_id, None)
            sample.output.finish_reason = sample.output.finish_reason or FinishReason.ABORT.value
        return True

    def has_unfinished_requests(self) -> bool:
        return bool(self._requests)

    def unfinished_request_ids(self) -> list[str]:
        return list(self._requests)

    # ------------------------------------------------------------------ the step
    def step(self) -> list[RequestOutput]:
        """Run one scheduled step; return a snapshot of every request that changed."""
        step = self.scheduler.schedule()
        sampling = {c.request_id: self._sampling_of(c.request_id) for c in step.chunks}
        for chunk in step.chunks:
            if chunk.is_new and chunk.request_id in self._sample_owner:
                self._requests[self._sample_owner[chunk.request_id]].prompt_logprobs.clear()
        result = self.runner.execute(step, sampling)
        if not result.logits_finite:
            logger.error("non-finite logits in a step with requests %s", [c.request_id for c in step.chunks])
        updates = self.scheduler.update_from_output(step, result.runner_output)
        now = time.monotonic()
        changed: dict[str, _Tracked] = {}
        requests, owners = self._requests, self._sample_owner
        for rid, records in result.prompt_logprobs.items():
            tracked = requests[owners[rid]]
            if not tracked.prompt_logprobs:
                tracked.prompt_logprobs.append(None)  # position 0 has no logprob
            tracked.prompt_logprobs.extend(_to_token_logprobs(r) for r in records)
        sampled_logprobs = result.sampled_logprobs
        for update in updates:
            owner = owners.get(update.request_id)
            if owner is None:
                continue
            tracked = requests[owner]
            sample = tracked.samples[update.request_id]
            out = sample.output
            new_ids = update.new_token_ids  # one token, or several with speculative decoding
            finish = update.finish_reason
            detokenizer = sample.detokenizer
            if detokenizer is not None:
                # token by token, so a stop string inside a multi-token update drops the tokens after it
                stop = None
                for count, token_id in enumerate(update.new_token_ids, 1):
                    delta = detokenizer.add_tokens((token_id,))
                    if delta.text:
                        out.text += delta.text
                    if delta.stop is not None:
                        stop, new_ids = delta.stop, update.new_token_ids[:count]
                        break
                if stop is not None and finish is None:
                    self.scheduler.finish_request(update.request_id, FinishReason.STOP)
                    finish, out.stop_reason = FinishReason.STOP, stop
                if finish is not None and stop is None:
                    out.text += detokenizer.finish().text
            out.token_ids.extend(new_ids)
            metrics = tracked.metrics
            if metrics.first_token_time_s is None:
                metrics.first_token_time_s = now
            metrics.token_times_s.extend([now] * len(new_ids))
            records = sampled_logprobs.get(update.request_id) if sampled_logprobs else None
            if records is not None and out.logprobs is not None:
                for record in (records if isinstance(records, list) else [records])[: len(new_ids)]:
                    out.logprobs.append(_to_token_logprobs(record))
                    out.cumulative_logprob = (out.cumulative_logprob or 0.0) + record.logprob
            if finish is not None:
                out.finish_reason = finish.value
                if finish is FinishReason.STOP and out.stop_reason is None and update.new_token_ids:
                    out.stop_reason = update.new_token_ids[-1]
                sample.finished = True
                self._sample_owner.pop(update.request_id, None)
            changed[owner] = tracked
        outputs = []
        for owner, tracked in changed.items():
            finished = tracked.finished
            if finished:
                tracked.metrics.finished_time_s = now
                requests.pop(owner, None)
            outputs.append(tracked.snapshot(finished))
        return outputs

    def _sampling_of(self, sub_id: str) -> RequestSampling:
        tracked = self._requests[self._sample_owner[sub_id]]
        sampling = tracked.samples[sub_id].sampling
        if sampling.wants_prompt_logprobs and len(tracked.prompt_logprobs) >= len(tracked.prompt_token_ids):
            return RequestSampling(sampling.params, sampling.seed, sampling.prompt_token_ids, False)
        return sampling


def speculative_k(spec: SpeculativeConfig | None, model_config) -> int:
    """K drafts per step for this checkpoint (0 = off); ConfigError when the checkpoint has no draft."""
    if spec is None:
        return 0
    if model_config.dspark is None:
        raise ConfigError(
            f"speculative_config method={spec.method!r} needs a DeepSeek-V4-Flash-0731-layout checkpoint with a "
            "DSpark draft (dspark_* keys in config.json, mtp.{0,1,2}.* tensors); this checkpoint has none"
        )
    return spec.resolve_k(model_config.dspark.block_size)


def _to_token_logprobs(record) -> TokenLogprobs:
    return TokenLogprobs(record.token_id, record.logprob, record.rank, {t.token_id: t.logprob for t in record.top})
