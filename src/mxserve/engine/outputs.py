"""What the engine hands back per request: vLLM-shaped output objects (pure Python)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class TokenLogprobs:
    token_id: int  # the chosen (sampled or prompt) token
    logprob: float  # its log-probability under the model's raw distribution (nats)
    rank: int  # 1 = the most likely token
    top: dict[int, float] = field(default_factory=dict)  # top-n token id → logprob


@dataclass
class RequestMetrics:
    arrival_time_s: float  # time.monotonic() when the request entered the engine
    first_token_time_s: float | None = None  # when the first output token was sampled
    finished_time_s: float | None = None
    token_times_s: list[float] = field(default_factory=list)  # when each output token was sampled

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_token_time_s is None else self.first_token_time_s - self.arrival_time_s

    @property
    def inter_token_latencies_s(self) -> list[float]:
        return [b - a for a, b in zip(self.token_times_s, self.token_times_s[1:], strict=False)]


@dataclass
class CompletionOutput:
    index: int  # which of the request's n samples
    text: str  # generated text so far (stop string excluded unless asked)
    token_ids: list[int]  # generated token ids so far
    finish_reason: str | None = None  # "stop", "length", "abort" or None while running
    stop_reason: str | int | None = None  # the stop string or token id that ended it, if any
    logprobs: list[TokenLogprobs] | None = None  # per generated token, when requested
    cumulative_logprob: float | None = None


@dataclass
class RequestOutput:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool
    metrics: RequestMetrics
    prompt_logprobs: list[TokenLogprobs | None] | None = None  # position 0 has none
