"""`POST /v1/completions`: prompts as text, token ids, or batches of either.

Choice `index` = prompt index × n + sample index (OpenAI's order for batched prompts). `echo`
prepends the prompt text (and, with `logprobs`, the prompt's tokens and logprobs, which the engine
computes with `SamplingParams.prompt_logprobs`); `max_tokens=0` is allowed with `echo` only, for
scoring a prompt without generating (one token is computed and dropped).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from fastapi import Request

from mxserve.engine.outputs import CompletionOutput, RequestOutput
from mxserve.server.errors import bad_request
from mxserve.server.logprobs_format import CompletionLogprobs, TokenText
from mxserve.server.protocol import CompletionRequest
from mxserve.server.sampling import EngineGroup, EngineJob, build_sampling_params, check_context
from mxserve.server.sse import DONE, event, sse_response
from mxserve.server.state import ServerState

DEFAULT_MAX_TOKENS = 16  # OpenAI's default for completions (an explicit null means the same)


@dataclass
class _Prompt:
    token_ids: list[int]
    text: str  # what `echo` prepends


def _normalize_prompts(state: ServerState, prompt: Any) -> list[_Prompt]:
    if isinstance(prompt, str):
        items: list[str | list[int]] = [prompt]
    elif prompt and all(isinstance(p, int) for p in prompt):
        items = [list(prompt)]
    else:
        items = list(prompt)
    if not items:
        raise bad_request("prompt is empty", param="prompt")
    prompts = []
    for item in items:
        try:
            ids = state.engine.check_prompt(item)
        except ValueError as exc:
            raise bad_request(str(exc), param="prompt") from None
        text = item if isinstance(item, str) else state.tokenizer.decode(ids)
        prompts.append(_Prompt(ids, text))
    return prompts


@dataclass
class _ChoiceState:
    """What a stream has already sent for one choice."""

    num_chars: int = 0
    num_tokens: int = 0
    started: bool = False
    logprobs: CompletionLogprobs | None = None
    finish_reason: str | None = None
    completion_tokens: int = 0


@dataclass
class _Plan:
    request_id: str
    model: str
    prompts: list[_Prompt]
    jobs: list[EngineJob]
    body: CompletionRequest
    score_only: bool  # max_tokens=0 with echo: drop the one computed token
    created: int = field(default_factory=lambda: int(time.time()))

    def choice_index(self, prompt_index: int, sample_index: int) -> int:
        return prompt_index * self.body.n + sample_index


def _plan(state: ServerState, body: CompletionRequest) -> _Plan:
    model = state.check_model(body.model)
    if body.suffix:
        raise bad_request("suffix is not supported", param="suffix")
    score_only = body.max_tokens == 0
    if score_only and not body.echo:
        raise bad_request("max_tokens=0 is only allowed with echo=true", param="max_tokens")
    if body.echo and body.stream and body.n > 1:
        raise bad_request("echo with stream and n > 1 is not supported", param="echo")
    prompts = _normalize_prompts(state, body.prompt)
    request_id = state.new_request_id("cmpl")
    jobs = []
    for i, prompt in enumerate(prompts):
        requested = 1 if score_only else (DEFAULT_MAX_TOKENS if body.max_tokens is None else body.max_tokens)
        max_tokens = check_context(len(prompt.token_ids), requested, state.max_model_len)
        params = build_sampling_params(
            body, max_tokens=max_tokens, logprobs=body.logprobs,
            prompt_logprobs=body.logprobs if body.echo and body.logprobs is not None else None,
            skip_special_tokens=body.skip_special_tokens)
        jobs.append(EngineJob(f"{request_id}-{i}", prompt.token_ids, params))
    return _Plan(request_id, model, prompts, jobs, body, score_only)


async def create_completion(state: ServerState, body: CompletionRequest, http_request: Request):
    plan = _plan(state, body)
    group = EngineGroup(state, plan.jobs)
    group.start()  # 503 here, before any byte of a stream is sent
    if body.stream:
        return sse_response(_stream(state, plan, group))
    finals: dict[str, RequestOutput] = {}
    async for output in group.outputs(http_request):
        if output.finished:
            finals[output.request_id] = output
    if len(finals) < len(plan.jobs):  # the client went away; nobody reads this
        return None
    return _response(state, plan, [finals[job.request_id] for job in plan.jobs])


def _outputs_of(output: RequestOutput, n: int) -> Sequence[CompletionOutput]:
    if output.outputs:
        return output.outputs
    return [CompletionOutput(i, "", [], finish_reason="abort") for i in range(n)]  # ended before any step


def _response(state: ServerState, plan: _Plan, finals: list[RequestOutput]) -> dict[str, Any]:
    token_text = TokenText(state.tokenizer) if plan.body.logprobs is not None else None
    choices = []
    num_prompt_tokens = num_completion_tokens = 0
    for i, (prompt, final) in enumerate(zip(plan.prompts, finals, strict=True)):
        num_prompt_tokens += len(prompt.token_ids)
        for out in _outputs_of(final, plan.body.n):
            token_ids, logprobs, text = out.token_ids, out.logprobs, out.text
            if plan.score_only:
                token_ids, logprobs, text = [], [], ""
            num_completion_tokens += len(token_ids)
            choice: dict[str, Any] = {"index": plan.choice_index(i, out.index), "text": text, "logprobs": None,
                                      "finish_reason": out.finish_reason, "stop_reason": out.stop_reason}
            if token_text is not None:
                builder = CompletionLogprobs(token_text)
                entries = _echo_entries(builder, prompt, final) if plan.body.echo else None
                generated = builder.entries(token_ids, logprobs or [])
                choice["logprobs"] = _concat(entries, generated)
            if plan.body.echo:
                choice["text"] = prompt.text + text
            choices.append(choice)
    choices.sort(key=lambda c: c["index"])
    return {"id": plan.request_id, "object": "text_completion", "created": plan.created, "model": plan.model,
            "choices": choices, "usage": _usage(num_prompt_tokens, num_completion_tokens)}


def _echo_entries(builder: CompletionLogprobs, prompt: _Prompt, output: RequestOutput) -> dict[str, list[Any]]:
    records = list(output.prompt_logprobs or [])
    records += [None] * (len(prompt.token_ids) - len(records))  # aborted before its prefill finished
    return builder.entries(prompt.token_ids, records[: len(prompt.token_ids)])


def _concat(first: dict[str, list[Any]] | None, second: dict[str, list[Any]]) -> dict[str, list[Any]]:
    if first is None:
        return second
    return {key: first[key] + second[key] for key in second}


def _usage(num_prompt_tokens: int, num_completion_tokens: int) -> dict[str, int]:
    return {"prompt_tokens": num_prompt_tokens, "completion_tokens": num_completion_tokens,
            "total_tokens": num_prompt_tokens + num_completion_tokens}


async def _stream(state: ServerState, plan: _Plan, group: EngineGroup) -> AsyncIterator[bytes]:
    body = plan.body
    token_text = TokenText(state.tokenizer) if body.logprobs is not None else None
    prompt_of = {job.request_id: i for i, job in enumerate(plan.jobs)}
    choices: dict[int, _ChoiceState] = {}
    try:
        async for chunk_bytes in _stream_chunks(state, plan, group, token_text, prompt_of, choices):
            yield chunk_bytes
    finally:
        group.abort()  # a client that left mid-stream frees its pages now, not at garbage collection


async def _stream_chunks(state: ServerState, plan: _Plan, group: EngineGroup, token_text: TokenText | None,
                         prompt_of: dict[str, int], choices: dict[int, _ChoiceState]) -> AsyncIterator[bytes]:
    body = plan.body

    def chunk(index: int, text: str, logprobs: dict[str, list[Any]] | None, finish_reason: str | None,
              stop_reason: str | int | None = None) -> bytes:
        return event({"id": plan.request_id, "object": "text_completion", "created": plan.created,
                      "model": plan.model, "choices": [{"index": index, "text": text, "logprobs": logprobs,
                                                         "finish_reason": finish_reason,
                                                         "stop_reason": stop_reason}]})

    async for output in group.outputs():
        prompt_index = prompt_of[output.request_id]
        prompt = plan.prompts[prompt_index]
        for out in _outputs_of(output, body.n):
            index = plan.choice_index(prompt_index, out.index)
            sent = choices.setdefault(index, _ChoiceState())
            if sent.finish_reason is not None:
                continue
            token_ids = [] if plan.score_only else out.token_ids
            text = "" if plan.score_only else out.text
            new_text, new_ids = text[sent.num_chars:], token_ids[sent.num_tokens:]
            new_logprobs = (out.logprobs or [])[sent.num_tokens:] if not plan.score_only else []
            logprobs = None
            if token_text is not None:
                if sent.logprobs is None:
                    sent.logprobs = CompletionLogprobs(token_text)
                echo = _echo_entries(sent.logprobs, prompt, output) if body.echo and not sent.started else None
                logprobs = _concat(echo, sent.logprobs.entries(new_ids, new_logprobs[: len(new_ids)]))
            if body.echo and not sent.started:
                new_text = prompt.text + new_text
            sent.started = True
            sent.num_chars, sent.num_tokens = len(text), len(token_ids)
            sent.completion_tokens = len(token_ids)
            finish = out.finish_reason if output.finished or out.finish_reason else None
            if not new_text and not new_ids and finish is None:
                continue
            sent.finish_reason = finish
            yield chunk(index, new_text, logprobs, finish, out.stop_reason if finish else None)
    if body.stream_options is not None and body.stream_options.include_usage:
        num_prompt_tokens = sum(len(p.token_ids) for p in plan.prompts)
        num_completion = sum(c.completion_tokens for c in choices.values())
        yield event({"id": plan.request_id, "object": "text_completion", "created": plan.created,
                     "model": plan.model, "choices": [], "usage": _usage(num_prompt_tokens, num_completion)})
    yield DONE
