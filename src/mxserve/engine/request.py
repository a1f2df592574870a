"""Request: one generation's token bookkeeping as the scheduler sees it (pure Python, no torch).

A request owns its prompt, the tokens sampled so far, how many of its tokens are already in the
caches (`num_computed_tokens`), its lifecycle status and the conditions that end it. It knows
nothing about sampling (temperature, top-p, seeds): the sampler reads those from elsewhere, and
the scheduler only needs to know when to stop.

Token accounting (as in vLLM v1): the request's tokens are prompt + outputs, `num_tokens` of them.
Positions [0, num_computed_tokens) are in the caches; the next step computes some of
[num_computed_tokens, num_tokens). When a step reaches num_tokens the model samples one more
token. A decode is therefore a chunk of exactly one token: the last sampled one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum, StrEnum


class RequestStatus(Enum):
    WAITING = "waiting"  # queued, holds no cache pages
    RUNNING = "running"  # admitted, holds cache pages for [0, num_computed_tokens)
    PREEMPTED = "preempted"  # evicted back to the waiting queue, pages freed, will recompute
    FINISHED_STOPPED = "finished_stopped"  # sampled an EOS / stop token (or a stop string, via the engine)
    FINISHED_LENGTH = "finished_length"  # reached max_tokens or the model's max length
    FINISHED_ABORTED = "finished_aborted"  # aborted by the client

    @property
    def is_finished(self) -> bool:
        # A tuple, not a set: membership by identity, without hashing an Enum (hot in big batches).
        return self in _FINISHED


_FINISHED = (RequestStatus.FINISHED_STOPPED, RequestStatus.FINISHED_LENGTH, RequestStatus.FINISHED_ABORTED)


class FinishReason(StrEnum):
    """Why a request finished, spelled as the OpenAI API spells `finish_reason`."""

    STOP = "stop"
    LENGTH = "length"
    ABORT = "abort"


FINISHED_STATUS = {
    FinishReason.STOP: RequestStatus.FINISHED_STOPPED,
    FinishReason.LENGTH: RequestStatus.FINISHED_LENGTH,
    FinishReason.ABORT: RequestStatus.FINISHED_ABORTED,
}
_REASON_OF_STATUS = {status: reason for reason, status in FINISHED_STATUS.items()}


@dataclass(frozen=True)
class StopCriteria:
    """When the scheduler ends a request. Stop strings are not here: they need text, so the
    engine's detokenizer checks them and calls `Scheduler.finish_request`."""

    max_tokens: int  # most output tokens to generate (>= 1)
    eos_token_ids: frozenset[int] = frozenset()  # end-of-sequence ids; ignored when ignore_eos
    stop_token_ids: frozenset[int] = frozenset()  # further ids that stop generation, even with ignore_eos
    ignore_eos: bool = False  # keep generating past EOS (benchmarks); stop_token_ids still apply

    def __post_init__(self) -> None:
        if not isinstance(self.max_tokens, int) or isinstance(self.max_tokens, bool) or self.max_tokens < 1:
            raise ValueError(f"StopCriteria.max_tokens must be an int >= 1, got {self.max_tokens!r}")
        # Accept any iterable of ids from callers, store an immutable set.
        object.__setattr__(self, "eos_token_ids", frozenset(self.eos_token_ids))
        object.__setattr__(self, "stop_token_ids", frozenset(self.stop_token_ids))


@dataclass(eq=False)  # identity equality: two requests are never "the same" by content
class Request:
    """Mutable per-request state. The scheduler is the only writer after construction."""

    request_id: str  # unique among live requests
    prompt_token_ids: tuple[int, ...]  # [num_prompt_tokens] never empty
    stop: StopCriteria  # when to end the request
    output_token_ids: list[int] = field(default_factory=list)  # [num_output_tokens] sampled so far
    num_computed_tokens: int = 0  # leading tokens whose cache entries exist (0 after preemption)
    status: RequestStatus = RequestStatus.WAITING
    arrival_index: int = -1  # order of `Scheduler.add_request` calls; set by the scheduler
    num_preemptions: int = 0  # times evicted and recomputed (a cost worth reporting)

    def __post_init__(self) -> None:
        self.prompt_token_ids = tuple(self.prompt_token_ids)

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.output_token_ids)

    @property
    def num_tokens(self) -> int:
        """Prompt plus output tokens: the length of the sequence so far."""
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    @property
    def num_uncomputed_tokens(self) -> int:
        """Tokens not yet in the caches: the whole remaining prompt, or 1 for a decode."""
        return self.num_tokens - self.num_computed_tokens

    @property
    def is_finished(self) -> bool:
        return self.status.is_finished

    @property
    def finish_reason(self) -> FinishReason | None:
        return _REASON_OF_STATUS.get(self.status)

    @property
    def all_token_ids(self) -> list[int]:
        return [*self.prompt_token_ids, *self.output_token_ids]

    def token_ids_between(self, start: int, end: int) -> tuple[int, ...]:
        """Tokens at positions [start, end) of prompt + output, without copying the whole sequence
        (a decode step of a 256K-token request should not build a 256K list)."""
        num_tokens = len(self.prompt_token_ids) + len(self.output_token_ids)
        if end == num_tokens == start + 1 and self.output_token_ids:  # a decode step's one input token
            return (self.output_token_ids[-1],)
        if not 0 <= start <= end <= num_tokens:
            raise ValueError(f"token range [{start}, {end}) is outside [0, {self.num_tokens}) of {self.request_id!r}")
        num_prompt = len(self.prompt_token_ids)
        head = self.prompt_token_ids[start:min(end, num_prompt)] if start < num_prompt else ()
        tail = self.output_token_ids[max(start - num_prompt, 0):end - num_prompt] if end > num_prompt else []
        return (*head, *tail)
