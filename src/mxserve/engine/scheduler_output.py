"""The typed contracts around one scheduling step (pure Python, no torch).

`SchedulerOutput` is what `Scheduler.schedule()` decides: which requests run this step, which
contiguous chunk of positions each computes, and where their cache entries live. The model runner
turns it into a `ForwardBatch` (one `SequenceChunk` per `ScheduledChunk`). `RunnerOutput` is the
part of the runner's answer the scheduler reads: the sampled token ids. `RequestUpdate` is what
`Scheduler.update_from_output` reports back to the engine for streaming.

There is no prefill/decode split: a decode is a chunk of one token, a prefill is one or more
chunks of up to the per-request cap, and both share one step's token budget.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from mxserve.engine.request import FinishReason


@dataclass(frozen=True)
class ScheduledChunk:
    """One request's work in a step: positions [start_pos, start_pos + num_tokens)."""

    request_id: str  # the request this chunk belongs to
    start_pos: int  # absolute position of the first token; positions before it are in the caches
    num_tokens: int  # tokens computed this step (>= 1); 1 for a decode
    token_ids: tuple[int, ...]  # [num_tokens] input token ids at those positions
    block_tables: Mapping[str, tuple[int, ...]]  # pool name → page ids covering [0, end_pos); read-only
    is_new: bool  # first chunk since admission or resume (start_pos == 0): the runner starts fresh state
    is_resumed: bool  # is_new after a preemption: its outputs so far are recomputed with the prompt
    samples_next_token: bool  # chunk ends at the last known token: the runner samples exactly one token
    # Speculative decoding (docs/speculative.md): positions [end_pos, end_pos + num_draft_tokens)
    # are reserved (pages and budget) for draft tokens the runner proposes and verifies in this
    # step; it then returns 1 .. 1 + num_draft_tokens tokens. 0 = a plain chunk.
    num_draft_tokens: int = 0

    @property
    def end_pos(self) -> int:
        """One past the chunk's last position."""
        return self.start_pos + self.num_tokens


@dataclass(frozen=True)
class SchedulerOutput:
    """Everything the model runner needs for one step, and what it must forget."""

    chunks: tuple[ScheduledChunk, ...]  # batch order: running requests (admission order), then admitted ones
    finished_request_ids: frozenset[str]  # finished or aborted since the previous step: drop their state
    preempted_request_ids: frozenset[str]  # evicted this step (pages freed); they return later with is_new
    total_num_tokens: int  # sum of chunk num_tokens, <= max_num_batched_tokens

    @property
    def num_scheduled_tokens(self) -> dict[str, int]:
        """Request id → tokens it computes this step."""
        return {chunk.request_id: chunk.num_tokens for chunk in self.chunks}

    @property
    def is_empty(self) -> bool:
        return not self.chunks

    def restricted_to(self, chunks: tuple[ScheduledChunk, ...]) -> SchedulerOutput:
        """This step with only `chunks` (a part the runner runs on its own; its finished and preempted
        requests were released already, so the part has none)."""
        return replace(self, chunks=chunks, finished_request_ids=frozenset(), preempted_request_ids=frozenset(),
                       total_num_tokens=sum(c.num_tokens for c in chunks))

    def chunk_of(self, request_id: str) -> ScheduledChunk:
        """The chunk of a scheduled request; KeyError when it is not in this step."""
        for chunk in self.chunks:
            if chunk.request_id == request_id:
                return chunk
        raise KeyError(request_id)


@dataclass(frozen=True)
class RunnerOutput:
    """What the model runner hands back to the scheduler after a step."""

    # Request id → tokens sampled this step: one for each chunk with samples_next_token (with
    # speculative decoding: the accepted drafts plus one, 1 .. 1 + num_draft_tokens), none (or
    # absent) for a chunk that stopped short of the prompt's end.
    sampled_token_ids: Mapping[str, tuple[int, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        frozen = {request_id: tuple(ids) for request_id, ids in self.sampled_token_ids.items()}
        object.__setattr__(self, "sampled_token_ids", MappingProxyType(frozen))


@dataclass(frozen=True)
class RequestUpdate:
    """One request's progress after a step, for the engine to detokenize and stream."""

    request_id: str  # the request
    new_token_ids: tuple[int, ...]  # tokens appended this step (after stop truncation); may be empty
    finish_reason: FinishReason | None  # set when the request finished this step
