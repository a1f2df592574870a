"""Scheduler: continuous batching with a per-step token budget (pure Python, no torch).

Each `schedule()` hands out `max_num_batched_tokens` tokens, as vLLM v1 does, with no
prefill/decode phases:

1. Running requests first, in admission order. A decoding request takes 1 token; a request
   still in its prompt takes its next chunk, at most `long_prefill_token_threshold` tokens, so a
   52K-token prompt leaves budget for the short requests queued behind it. When a pool has no
   page for a chunk, the most recently admitted running request is preempted (pages freed, back to
   the front of the waiting queue, recomputed later); the oldest request therefore always makes
   progress.
2. Then waiting requests, strictly FIFO (no skipping a request that does not fit), while budget,
   `max_num_seqs` and free pages allow. Nothing is admitted in a step that preempted: admitting
   would only evict again.

Preemption is by recompute: on resume the request's prompt and the tokens it already generated
are fed again as a prefill and it samples its next token from there, so with a deterministic
model its final tokens are the ones it would have produced without preemption.

`schedule()` commits the chunk: it grows the block tables and advances `num_computed_tokens`.
With speculative decoding (`num_speculative_tokens` K > 0) a decoding request's chunk also
reserves K draft positions (budget and pages), or fewer so the step's verify rows stay within
`max_verify_rows` (the speculative step graphs' largest bucket); `update_from_output()` then advances
`num_computed_tokens` by the drafts that were accepted. `update_from_output()` appends the
sampled tokens and decides stops (max_tokens, the model's
max length, EOS unless ignore_eos, stop token ids). Stop strings need text, so the engine's
detokenizer calls `finish_request(id, FinishReason.STOP)`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from mxserve.config.scheduler_config import SchedulerConfig
from mxserve.engine.block_manager import BlockManager
from mxserve.engine.request import FINISHED_STATUS, FinishReason, Request, RequestStatus
from mxserve.engine.scheduler_output import RequestUpdate, RunnerOutput, ScheduledChunk, SchedulerOutput


@dataclass(frozen=True)
class SchedulerStats:
    num_running: int  # requests holding cache pages
    num_waiting: int  # requests queued (new or preempted)
    cache_usage: float  # fraction of pages in use in the fullest pool, [0, 1]
    cache_usage_by_pool: Mapping[str, float]  # pool name → fraction of its pages in use
    num_preemptions: int  # preemptions since the scheduler started


class Scheduler:
    """Owns the waiting queue, the running set and the block manager's pages."""

    def __init__(self, config: SchedulerConfig, block_manager: BlockManager) -> None:
        if not block_manager.fits_at_all(config.max_model_len):
            short = {
                name: f"needs {spec.pages_needed(config.max_model_len)} pages, has {spec.num_blocks}"
                for name, spec in block_manager.pool_specs.items()
                if spec.pages_needed(config.max_model_len) > spec.num_blocks
            }
            # Without this, one long request could preempt itself forever.
            raise ValueError(f"the cache cannot hold one max_model_len={config.max_model_len} sequence: {short}")
        self.config = config
        self.block_manager = block_manager
        self._requests: dict[str, Request] = {}  # every live (unfinished) request by id
        self._waiting: deque[Request] = deque()  # FIFO; preempted requests go back to the front
        self._running: list[Request] = []  # admission order; the tail is the next preemption victim
        self._finished_ids: list[str] = []  # finished or aborted since the last schedule()
        self._next_arrival_index = 0
        self._num_preemptions = 0

    # ------------------------------------------------------------------ requests in and out
    def add_request(self, request: Request) -> None:
        """Queue a fresh request. ValueError for a duplicate id, an empty prompt, a prompt longer
        than max_model_len, or a request that has already run."""
        if request.request_id in self._requests:
            raise ValueError(f"request id {request.request_id!r} is already live")
        if request.num_prompt_tokens == 0:
            raise ValueError(f"request {request.request_id!r} has an empty prompt")
        if request.num_prompt_tokens > self.config.max_model_len:
            raise ValueError(
                f"request {request.request_id!r}: prompt of {request.num_prompt_tokens} tokens is longer than "
                f"max_model_len={self.config.max_model_len}"
            )
        if request.status is not RequestStatus.WAITING or request.num_computed_tokens or request.output_token_ids:
            raise ValueError(f"request {request.request_id!r} is not fresh (status {request.status.value})")
        request.arrival_index = self._next_arrival_index
        self._next_arrival_index += 1
        self._requests[request.request_id] = request
        self._waiting.append(request)

    def finish_request(self, request_id: str, reason: FinishReason) -> bool:
        """End a live request now, in any state, freeing all its pages. Returns False when no
        such request is live (already finished, or never added): aborts race with finishes."""
        request = self._requests.get(request_id)
        if request is None:
            return False
        self._finish(request, reason)
        return True

    def abort_request(self, request_id: str) -> bool:
        """finish_request(request_id, ABORT)."""
        return self.finish_request(request_id, FinishReason.ABORT)

    def has_unfinished_requests(self) -> bool:
        return bool(self._requests)

    @property
    def num_running(self) -> int:
        return len(self._running)

    @property
    def num_waiting(self) -> int:
        return len(self._waiting)

    def stats(self) -> SchedulerStats:
        by_pool = {name: self.block_manager.usage(name) for name in self.block_manager.pool_specs}
        return SchedulerStats(
            num_running=len(self._running),
            num_waiting=len(self._waiting),
            cache_usage=max(by_pool.values()),
            cache_usage_by_pool=MappingProxyType(by_pool),
            num_preemptions=self._num_preemptions,
        )

    # ------------------------------------------------------------------ one step
    def schedule(self) -> SchedulerOutput:
        """Decide this step's chunks (see the module docstring for the policy)."""
        budget = self.config.max_num_batched_tokens
        chunks: list[ScheduledChunk] = []
        preempted_ids: list[str] = []

        max_drafts = self._max_drafts_per_request()
        index = 0
        while index < len(self._running) and budget > 0:
            request = self._running[index]
            num_new = self._chunk_size(request, budget)
            if num_new == 0:  # its sampled token has not come back yet
                index += 1
                continue
            num_drafts = min(max_drafts, self._num_draft_tokens(request, budget))
            while not self.block_manager.allocate(request, num_new + num_drafts):
                victim = self._running.pop()  # most recently admitted; never one scheduled this step
                self._preempt(victim)
                preempted_ids.append(victim.request_id)
                if victim is request:
                    break
            else:
                chunks.append(self._commit_chunk(request, num_new, is_new=False, is_resumed=False,
                                                 num_draft_tokens=num_drafts))
                budget -= num_new + num_drafts
                index += 1

        while not preempted_ids and self._waiting and budget > 0 and len(self._running) < self.config.max_num_seqs:
            request = self._waiting[0]
            num_new = self._chunk_size(request, budget)
            if not self.block_manager.allocate(request, num_new):
                break  # FIFO: a request that does not fit blocks the ones behind it
            self._waiting.popleft()
            is_resumed = request.status is RequestStatus.PREEMPTED
            request.status = RequestStatus.RUNNING
            self._running.append(request)
            chunks.append(self._commit_chunk(request, num_new, is_new=True, is_resumed=is_resumed))
            budget -= num_new

        finished_ids = frozenset(self._finished_ids)
        self._finished_ids.clear()
        return SchedulerOutput(
            chunks=tuple(chunks),
            finished_request_ids=finished_ids,
            preempted_request_ids=frozenset(preempted_ids),
            total_num_tokens=self.config.max_num_batched_tokens - budget,
        )

    def update_from_output(self, scheduler_output: SchedulerOutput, runner_output: RunnerOutput) -> list[RequestUpdate]:
        """Append the sampled tokens, decide stops, free finished requests' pages. Returns one
        update per request that received a token, in batch order. Requests finished or aborted
        since the step was scheduled are skipped. ValueError (before any change) when the runner
        output does not match the step: a token for a chunk that stopped short of the sequence
        end, none (or several) for one that reached it, a token for an unscheduled request, or a
        step that was already applied."""
        sampled = runner_output.sampled_token_ids
        scheduled_ids = {chunk.request_id for chunk in scheduler_output.chunks}
        unexpected = sorted(set(sampled) - scheduled_ids)
        if unexpected:
            raise ValueError(f"runner output has tokens for requests not scheduled this step: {unexpected}")
        for chunk in scheduler_output.chunks:
            request = self._requests.get(chunk.request_id)
            if request is None:
                continue
            num_sampled = len(sampled.get(chunk.request_id, ()))
            most = 1 + chunk.num_draft_tokens if chunk.samples_next_token else 0
            least = 1 if chunk.samples_next_token else 0
            if not least <= num_sampled <= most:
                expected = str(least) if least == most else f"{least}..{most}"
                raise ValueError(
                    f"request {chunk.request_id!r}: runner sampled {num_sampled} tokens, expected {expected} "
                    f"(chunk [{chunk.start_pos}, {chunk.end_pos}), samples_next_token={chunk.samples_next_token})"
                )
            if chunk.samples_next_token and request.num_tokens != chunk.end_pos:
                # Applying the same step twice would append its token twice.
                raise ValueError(
                    f"request {chunk.request_id!r}: stale scheduler output (chunk ends at {chunk.end_pos}, "
                    f"the request already has {request.num_tokens} tokens)"
                )

        updates: list[RequestUpdate] = []
        for chunk in scheduler_output.chunks:
            request = self._requests.get(chunk.request_id)
            if request is None or not chunk.samples_next_token:
                continue
            tokens = sampled[chunk.request_id]
            appended: list[int] = []
            reason = None
            for token_id in tokens:  # several with speculative decoding; a stop truncates the rest
                request.output_token_ids.append(token_id)
                appended.append(token_id)
                reason = self._stop_reason(request, token_id)
                if reason is not None:
                    break
            if reason is not None:
                self._finish(request, reason)
            else:
                # accepted drafts: their positions were computed in this step's verify chunk
                request.num_computed_tokens += len(tokens) - 1
            updates.append(RequestUpdate(request.request_id, tuple(appended), reason))
        return updates

    # ------------------------------------------------------------------ internals
    def _chunk_size(self, request: Request, budget: int) -> int:
        return min(request.num_uncomputed_tokens, self.config.long_prefill_token_threshold, budget)

    def _max_drafts_per_request(self) -> int:
        """K, or fewer so that every decoding request's 1 + drafts rows fit `max_verify_rows`."""
        k, rows = self.config.num_speculative_tokens, self.config.max_verify_rows
        if not k or not rows:
            return k
        decoding = sum(1 for r in self._running if r.num_uncomputed_tokens == 1)
        return max(0, min(k, rows // max(1, decoding) - 1))

    def _num_draft_tokens(self, request: Request, budget: int) -> int:
        """Draft slots for a decoding request (speculative decoding): K, fewer where the step's
        budget, max_tokens (the bonus token always comes) or max_model_len leave no room."""
        k = self.config.num_speculative_tokens
        if k == 0 or request.num_uncomputed_tokens != 1 or request.num_output_tokens == 0:
            return 0  # off, or a prefill chunk
        room = min(budget - 1, request.stop.max_tokens - request.num_output_tokens - 1,
                   self.config.max_model_len - request.num_tokens - 1)
        return max(0, min(k, room))

    def _commit_chunk(self, request: Request, num_new: int, *, is_new: bool, is_resumed: bool,
                      num_draft_tokens: int = 0) -> ScheduledChunk:
        """Build the request's chunk (its pages are already allocated) and mark it computed."""
        start = request.num_computed_tokens
        end = start + num_new
        chunk = ScheduledChunk(
            request_id=request.request_id,
            start_pos=start,
            num_tokens=num_new,
            token_ids=request.token_ids_between(start, end),
            block_tables=self.block_manager.block_tables(request),
            is_new=is_new,
            is_resumed=is_resumed,
            samples_next_token=end == request.num_tokens,
            num_draft_tokens=num_draft_tokens,
        )
        request.num_computed_tokens = end
        return chunk

    def _preempt(self, request: Request) -> None:
        self.block_manager.free(request)
        request.num_computed_tokens = 0  # recompute prompt + outputs on resume
        request.status = RequestStatus.PREEMPTED
        request.num_preemptions += 1
        self._num_preemptions += 1
        self._waiting.appendleft(request)

    def _stop_reason(self, request: Request, token_id: int) -> FinishReason | None:
        stop = request.stop
        if token_id in stop.stop_token_ids or (not stop.ignore_eos and token_id in stop.eos_token_ids):
            return FinishReason.STOP
        if request.num_output_tokens >= stop.max_tokens or request.num_tokens >= self.config.max_model_len:
            return FinishReason.LENGTH
        return None

    def _finish(self, request: Request, reason: FinishReason) -> None:
        if request.status is RequestStatus.RUNNING:
            self._running.remove(request)
        else:
            self._waiting.remove(request)
        self.block_manager.free(request)
        request.status = FINISHED_STATUS[reason]
        del self._requests[request.request_id]
        self._finished_ids.append(request.request_id)
