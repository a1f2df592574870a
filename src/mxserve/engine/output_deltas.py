"""Cumulative `RequestOutput` snapshots → per-step deltas (engine process) → snapshots again (server).

`LLMEngine.step()` returns, for each request it changed, a snapshot of everything generated so far.
Sending those across a process boundary would cost O(generated length) per token; `DeltaTracker`
remembers how much of each request it has already sent and cuts the new part. `RequestAssembly`
is the other half: it appends the deltas and hands out snapshots equal to the ones the engine
made, as independent copies (a later step never changes a snapshot a consumer holds), which is
what the server code consumes from `AsyncEngine` too.

Both rely on the engine only ever appending (text, token ids, logprobs, token times); a sample's
finish reason and stop reason are set once.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mxserve.engine.core_messages import OutputDelta, SampleDelta
from mxserve.engine.outputs import CompletionOutput, RequestMetrics, RequestOutput, held_copy
from mxserve.engine.request import FinishReason


@dataclass
class _Sent:
    """How much of one request the engine process has sent."""

    num_chars: list[int] = field(default_factory=list)  # per sample
    num_tokens: list[int] = field(default_factory=list)
    num_logprobs: list[int] = field(default_factory=list)
    num_token_times: int = 0
    num_prompt_logprobs: int = 0


class DeltaTracker:
    """Engine-process side: one `OutputDelta` per changed request, cut from the engine's snapshot."""

    def __init__(self) -> None:
        self._sent: dict[str, _Sent] = {}

    def delta(self, output: RequestOutput) -> OutputDelta:
        sent = self._sent.get(output.request_id)
        if sent is None:
            sent = self._sent[output.request_id] = _Sent()
        samples = []
        for i, out in enumerate(output.outputs):
            if i == len(sent.num_chars):
                sent.num_chars.append(0)
                sent.num_tokens.append(0)
                sent.num_logprobs.append(0)
            new_logprobs = None
            if out.logprobs is not None:
                new_logprobs = out.logprobs[sent.num_logprobs[i]:]
                sent.num_logprobs[i] = len(out.logprobs)
            samples.append(SampleDelta(out.index, out.text[sent.num_chars[i]:], out.token_ids[sent.num_tokens[i]:],
                                       new_logprobs, out.cumulative_logprob, out.finish_reason, out.stop_reason))
            sent.num_chars[i], sent.num_tokens[i] = len(out.text), len(out.token_ids)
        metrics = output.metrics
        new_times = metrics.token_times_s[sent.num_token_times:]
        sent.num_token_times = len(metrics.token_times_s)
        new_prompt_logprobs, prompt_logprobs_start = None, sent.num_prompt_logprobs
        if output.prompt_logprobs is not None:
            if len(output.prompt_logprobs) < prompt_logprobs_start:  # recomputed after a preemption: resend
                prompt_logprobs_start = 0
            new_prompt_logprobs = output.prompt_logprobs[prompt_logprobs_start:]
            sent.num_prompt_logprobs = len(output.prompt_logprobs)
        if output.finished:
            del self._sent[output.request_id]
        return OutputDelta(output.request_id, metrics.arrival_time_s, samples, new_times, metrics.first_token_time_s,
                           metrics.finished_time_s, new_prompt_logprobs, prompt_logprobs_start,
                           output.finished)

    def forget(self, request_id: str) -> None:
        """The request left the engine without a finished snapshot (aborted)."""
        self._sent.pop(request_id, None)


class RequestAssembly:
    """Server side: one request's output rebuilt from its deltas."""

    def __init__(self, request_id: str, prompt_token_ids: list[int], arrival_time_s: float) -> None:
        self.output = RequestOutput(request_id, None, prompt_token_ids, [], False, RequestMetrics(arrival_time_s))
        self.aborted = False

    @property
    def finished(self) -> bool:
        return self.output.finished

    def apply(self, delta: OutputDelta) -> None:
        output = self.output
        for i, sample in enumerate(delta.samples):
            if i == len(output.outputs):
                output.outputs.append(CompletionOutput(sample.index, "", [],
                                                       logprobs=None if sample.new_logprobs is None else []))
            out = output.outputs[i]
            if sample.new_text:
                out.text += sample.new_text
            out.token_ids.extend(sample.new_token_ids)
            if sample.new_logprobs is not None and out.logprobs is not None:
                out.logprobs.extend(sample.new_logprobs)
            out.cumulative_logprob = sample.cumulative_logprob
            out.finish_reason, out.stop_reason = sample.finish_reason, sample.stop_reason
        metrics = output.metrics
        metrics.arrival_time_s = delta.arrival_time_s
        metrics.token_times_s.extend(delta.new_token_times_s)
        metrics.first_token_time_s, metrics.finished_time_s = delta.first_token_time_s, delta.finished_time_s
        if delta.new_prompt_logprobs is not None:
            kept = (output.prompt_logprobs or [])[: delta.prompt_logprobs_start]
            output.prompt_logprobs = kept + delta.new_prompt_logprobs
        output.finished = delta.finished

    def abort(self) -> None:
        """The request ended without a natural finish: its next snapshot is its last, finished, with
        "abort" on every sample that had not finished (as `AsyncEngine` reports it)."""
        self.aborted = True
        output = self.output
        for out in output.outputs:
            out.finish_reason = out.finish_reason or FinishReason.ABORT.value
        output.finished = True

    def snapshot(self) -> RequestOutput:
        """A copy of the output so far that later deltas leave alone (the consumer may hold it while more
        arrives). The metrics object is shared, as `AsyncEngine`'s snapshots share the engine's."""
        return held_copy(self.output)
