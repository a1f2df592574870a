"""The messages between the server process and the engine process (`ProcessEngine` ↔ `engine_core`).

Two one-way pipes (multiprocessing connections, pickled objects). Commands go to the engine
process: `AddRequest`, `AbortRequest`, `ShutdownCore`. Back come one `CoreReady` (or `CoreFailed`)
at start-up, then one `StepBatch` per engine loop turn that changed anything: every request's
update of that step as a delta (new tokens, new text, new logprobs) rather than a cumulative
snapshot, so a message's size does not grow with the length of the generations. `CoreFailed`
after start-up means the loop died; the engine process exits after sending it.

Everything here must pickle; no torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from mxserve.engine.engine_client import EngineStats
from mxserve.engine.engine_info import EngineInfo
from mxserve.engine.outputs import TokenLogprobs
from mxserve.engine.sampling_params import SamplingParams


# ---------------------------------------------------------------------- server → engine process
@dataclass(frozen=True)
class AddRequest:
    request_id: str
    prompt_token_ids: list[int]  # validated by the front (EngineInfo.encode_prompt)
    params: SamplingParams


@dataclass(frozen=True)
class AbortRequest:
    request_id: str


@dataclass(frozen=True)
class ShutdownCore:
    """Abort whatever is left (reported in a last StepBatch), close the engine, exit."""


Command = AddRequest | AbortRequest | ShutdownCore


# ---------------------------------------------------------------------- engine process → server
@dataclass(frozen=True)
class CoreReady:
    info: EngineInfo  # what the front needs to validate prompts and answer /tokenize, /v1/models
    stats: EngineStats  # the idle engine's stats (cache usage 0)


@dataclass(frozen=True)
class CoreFailed:
    stage: Literal["start", "step"]  # loading the engine, or the step loop while serving
    error: str  # "ExceptionType: message", one line for the user
    traceback: str  # the engine process's formatted traceback (logged by the front)
    bad_input: bool = False  # a CheckpointError / ConfigError: the command line's fault, not the machine's


@dataclass(slots=True)
class SampleDelta:
    """What one of a request's n samples gained in one step."""

    index: int  # which sample (CompletionOutput.index)
    new_text: str  # text appended this step
    new_token_ids: list[int]  # token ids appended this step
    new_logprobs: list[TokenLogprobs] | None  # logprobs appended this step; None when not requested
    cumulative_logprob: float | None  # the running sum after this step (replaces the front's value)
    finish_reason: str | None  # set once, when the sample finishes
    stop_reason: str | int | None


@dataclass(slots=True)
class OutputDelta:
    """One request's update in one step (a `RequestOutput` minus what the front already has)."""

    request_id: str
    arrival_time_s: float  # time.monotonic() in the engine process (the same clock as the front's on Linux)
    samples: list[SampleDelta]  # every sample of the request, in the snapshot's order
    new_token_times_s: list[float]  # RequestMetrics.token_times_s appended this step
    first_token_time_s: float | None
    finished_time_s: float | None
    # prompt logprobs from position prompt_logprobs_start on (position 0 is None); the start is where
    # the previous delta ended, or 0 when a preempted request recomputed its prompt from the beginning
    new_prompt_logprobs: list[TokenLogprobs | None] | None
    prompt_logprobs_start: int
    finished: bool


@dataclass(frozen=True)
class StepBatch:
    deltas: list[OutputDelta]  # the requests this step changed
    aborted_ids: list[str]  # requests the engine dropped this turn (abort command, refusal, shutdown)
    stats: EngineStats  # after this turn; num_pending is the engine process's own count
    refusals: dict[str, str] = field(default_factory=dict)  # request id → why add_request refused it (logged)


CoreMessage = CoreReady | CoreFailed | StepBatch
