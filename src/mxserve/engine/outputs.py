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


def held_copy(output: RequestOutput) -> RequestOutput:
    """A copy a consumer may hold while the engine keeps appending to the original: the token,
    logprob and prompt-logprob lists are copied, the metrics object is shared. Both engine fronts
    hand these out every step. Constructors, not dataclasses.replace: it runs for every request
    every step, on the event loop (replace was the process front's top pure-Python cost in a
    cProfile of the stub server at 64 streams)."""
    outputs = [CompletionOutput(o.index, o.text, list(o.token_ids), o.finish_reason, o.stop_reason,
                                None if o.logprobs is None else list(o.logprobs), o.cumulative_logprob)
               for o in output.outputs]
    prompt_logprobs = None if output.prompt_logprobs is None else list(output.prompt_logprobs)
    return RequestOutput(output.request_id, output.prompt, output.prompt_token_ids, outputs, output.finished,
                         output.metrics, prompt_logprobs)
