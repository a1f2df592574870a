"""From a request body to engine work: SamplingParams, the context-length check, and running a
group of engine requests (one per prompt) into one stream of snapshots.

`EngineGroup` is where a client going away turns into aborts: a streaming response's generator is
cancelled by starlette when the client disconnects, and a non-streaming handler polls
`Request.is_disconnected()` while it waits; either way every unfinished engine request of the
group is aborted, which frees its cache pages.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from fastapi import Request

from mxserve.engine.engine_client import EngineDeadError, QueueFullError
from mxserve.engine.outputs import RequestOutput
from mxserve.engine.sampling_params import SamplingParams
from mxserve.server.errors import APIError, bad_request
from mxserve.server.protocol import SamplingFields
from mxserve.server.state import ServerState

_DISCONNECT_POLL_S = 1.0  # how often a non-streaming handler checks that its client is still there
_PARAM_NAME = re.compile(r"SamplingParams\.(\w+)")


def build_sampling_params(body: SamplingFields, *, max_tokens: int, logprobs: int | None,
                          prompt_logprobs: int | None, skip_special_tokens: bool) -> SamplingParams:
    """SamplingParams for one engine request; 400 naming the field when a value is out of range."""
    try:
        return SamplingParams(
            n=body.n,
            temperature=1.0 if body.temperature is None else body.temperature,
            top_p=1.0 if body.top_p is None else body.top_p,
            top_k=0 if body.top_k is None else body.top_k,
            min_p=0.0 if body.min_p is None else body.min_p,
            seed=body.seed,
            max_tokens=max_tokens,
            stop=() if body.stop is None else body.stop,
            stop_token_ids=tuple(body.stop_token_ids or ()),
            ignore_eos=body.ignore_eos,
            min_tokens=body.min_tokens,
            logprobs=logprobs,
            prompt_logprobs=prompt_logprobs,
            skip_special_tokens=skip_special_tokens,
            include_stop_str_in_output=body.include_stop_str_in_output,
        )
    except ValueError as exc:
        match = _PARAM_NAME.search(str(exc))
        raise bad_request(str(exc).replace("SamplingParams.", ""), param=match.group(1) if match else None) from None


def check_context(num_prompt_tokens: int, max_tokens: int | None, max_model_len: int, *,
                  prompt_param: str = "prompt") -> int:
    """The max_tokens to run with: the rest of the context when None; 400 when the prompt leaves no
    room or prompt + max_tokens exceeds the context (OpenAI's and vLLM's rule)."""
    if num_prompt_tokens >= max_model_len:
        raise bad_request(f"this model's maximum context length is {max_model_len} tokens, and the prompt has "
                          f"{num_prompt_tokens} tokens, which leaves no room to generate", param=prompt_param)
    if max_tokens is None:
        return max_model_len - num_prompt_tokens
    if num_prompt_tokens + max_tokens > max_model_len:
        raise bad_request(f"this model's maximum context length is {max_model_len} tokens; you requested "
                          f"{num_prompt_tokens + max_tokens} tokens ({num_prompt_tokens} in the prompt, "
                          f"{max_tokens} for the completion)", param="max_tokens")
    return max_tokens


@dataclass(frozen=True)
class EngineJob:
    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams


class EngineGroup:
    """The engine requests of one HTTP request (one per prompt), all feeding one queue."""

    def __init__(self, state: ServerState, jobs: list[EngineJob]) -> None:
        self._state = state
        self._jobs = jobs
        self._sink: asyncio.Queue[RequestOutput] = asyncio.Queue()
        self._unfinished: set[str] = set()

    def start(self) -> None:
        """Submit every job; 503 (and nothing left queued) when the engine is full or shutting down."""
        try:
            for job in self._jobs:
                self._state.engine.submit(job.request_id, job.prompt_token_ids, job.params, self._sink)
                self._unfinished.add(job.request_id)
        except (QueueFullError, EngineDeadError) as exc:
            self.abort()
            raise APIError(503, f"the server cannot take this request now: {exc}", code="server_busy") from None

    def abort(self) -> None:
        for request_id in self._unfinished:
            self._state.engine.abort(request_id)
        self._unfinished.clear()

    async def outputs(self, http_request: Request | None = None) -> AsyncIterator[RequestOutput]:
        """Snapshots in arrival order until every request is finished. Leaving early (the consumer
        is cancelled or closes the iterator) aborts the unfinished ones. With `http_request`
        (non-streaming handlers), a disconnected client ends the iteration the same way."""
        next_check = time.monotonic() + _DISCONNECT_POLL_S
        try:
            while self._unfinished:
                if http_request is None:
                    output = await self._sink.get()
                else:
                    # Snapshots arrive every step, so the check runs on a clock, not on quiet periods.
                    try:
                        output = await asyncio.wait_for(self._sink.get(), max(next_check - time.monotonic(), 0.01))
                    except TimeoutError:
                        output = None
                    if time.monotonic() >= next_check:
                        next_check = time.monotonic() + _DISCONNECT_POLL_S
                        if await http_request.is_disconnected():
                            return
                    if output is None:
                        continue
                if output.finished:
                    self._unfinished.discard(output.request_id)
                yield output
        finally:
            self.abort()
