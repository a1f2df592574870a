"""`POST /v1/chat/completions`: the DeepSeek-V4 prompt encoding, reasoning, tools, streaming.

Thinking mode and effort (docs/server.md): `reasoning_effort` maps as vLLM maps it
(`map_openai_reasoning_effort`: not given → thinking with "high"; "none" → chat mode); an explicit
`chat_template_kwargs` `thinking` (or `enable_thinking`) then switches thinking on or off. The
prompt generation (preview / 0731 effort tables) comes from the checkpoint.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from fastapi import Request

from mxserve.engine.outputs import RequestOutput
from mxserve.engine.prompt import encode_messages, map_openai_reasoning_effort
from mxserve.server.chat_format import (
    StreamingChoice,
    chat_message,
    finish_reason_of,
    parse_turn,
    strip_eos,
)
from mxserve.server.errors import bad_request
from mxserve.server.logprobs_format import TokenText, chat_logprobs
from mxserve.server.protocol import ChatCompletionRequest, ChatMessage
from mxserve.server.sampling import EngineGroup, EngineJob, build_sampling_params, check_context
from mxserve.server.sse import DONE, event, sse_response
from mxserve.server.state import ServerState


def resolve_thinking(reasoning_effort: str | None, template_kwargs: dict[str, Any] | None) -> tuple[bool, str | None]:
    """(thinking, encoder effort) for a request."""
    thinking, effort = map_openai_reasoning_effort(reasoning_effort)
    kwargs = template_kwargs or {}
    for key in ("thinking", "enable_thinking"):
        if key in kwargs:
            value = kwargs[key]
            if not isinstance(value, bool):
                raise bad_request(f"chat_template_kwargs.{key} must be a boolean, got {value!r}",
                                  param=f"chat_template_kwargs.{key}")
            thinking = value
            break
    if thinking and effort is None:  # "none" effort, thinking switched on explicitly
        effort = "high"
    return thinking, effort


def message_dicts(messages: list[ChatMessage]) -> list[dict[str, Any]]:
    """Pydantic messages → the dicts `encode_messages` reads (tool arguments as JSON text)."""
    dicts = []
    for message in messages:
        item = message.model_dump(exclude_none=True)
        for call in item.get("tool_calls", ()):
            arguments = call["function"]["arguments"]
            if isinstance(arguments, dict):
                call["function"]["arguments"] = json.dumps(arguments, ensure_ascii=False)
        dicts.append(item)
    return dicts


def encode_chat_prompt(state: ServerState, messages: list[ChatMessage], *, thinking: bool, effort: str | None,
                       tools: list[dict[str, Any]] | None) -> list[int]:
    try:
        text = encode_messages(message_dicts(messages), thinking=thinking, reasoning_effort=effort,
                               generation=state.engine.info.model_config.layout, tools=tools)
        return state.engine.check_prompt(state.tokenizer.encode(text))
    except ValueError as exc:
        raise bad_request(str(exc), param="messages") from None


@dataclass
class _Plan:
    request_id: str
    model: str
    prompt_token_ids: list[int]
    job: EngineJob
    body: ChatCompletionRequest
    thinking: bool
    tools_enabled: bool
    created: int = field(default_factory=lambda: int(time.time()))


def _plan(state: ServerState, body: ChatCompletionRequest) -> _Plan:
    model = state.check_model(body.model)
    if body.tool_choice == "required" or isinstance(body.tool_choice, dict):
        raise bad_request("tool_choice 'required' or a named function is not supported; use 'auto' or 'none'",
                          param="tool_choice")
    tools_enabled = bool(body.tools) and body.tool_choice != "none"
    tools = [t.model_dump(exclude_none=True) for t in body.tools] if tools_enabled and body.tools else None
    thinking, effort = resolve_thinking(body.reasoning_effort, body.chat_template_kwargs)
    ids = encode_chat_prompt(state, body.messages, thinking=thinking, effort=effort, tools=tools)
    requested = body.max_completion_tokens if body.max_completion_tokens is not None else body.max_tokens
    max_tokens = check_context(len(ids), requested, state.max_model_len, prompt_param="messages")
    logprobs = (body.top_logprobs or 0) if body.logprobs else None
    if body.top_logprobs is not None and not body.logprobs:
        raise bad_request("top_logprobs needs logprobs=true", param="top_logprobs")
    # Special tokens stay in the text: the parser needs </think> and ｜DSML｜ (EOS is stripped later).
    params = build_sampling_params(body, max_tokens=max_tokens, logprobs=logprobs, prompt_logprobs=None,
                                   skip_special_tokens=False)
    request_id = state.new_request_id("chatcmpl")
    return _Plan(request_id, model, ids, EngineJob(request_id, ids, params), body, thinking, tools_enabled)


async def create_chat_completion(state: ServerState, body: ChatCompletionRequest, http_request: Request):
    plan = _plan(state, body)
    group = EngineGroup(state, [plan.job])
    group.start()  # 503 here, before any byte of a stream is sent
    if body.stream:
        return sse_response(_stream(state, plan, group))
    final: RequestOutput | None = None
    async for output in group.outputs(http_request):
        if output.finished:
            final = output
    if final is None:  # the client went away
        return None
    return _response(state, plan, final)


def _response(state: ServerState, plan: _Plan, final: RequestOutput) -> dict[str, Any]:
    token_text = TokenText(state.tokenizer) if plan.body.logprobs else None
    choices = []
    num_completion_tokens = 0
    for out in final.outputs:
        parsed = parse_turn(out.text, thinking=plan.thinking, tools_enabled=plan.tools_enabled)
        num_completion_tokens += len(out.token_ids)
        logprobs = None
        if token_text is not None:
            logprobs = {"content": chat_logprobs(token_text, out.token_ids, out.logprobs or [],
                                                 num_top=plan.body.top_logprobs or 0)}
        choices.append({"index": out.index, "message": chat_message(parsed), "logprobs": logprobs,
                        "finish_reason": finish_reason_of(parsed, out.finish_reason),
                        "stop_reason": out.stop_reason})
    if not choices:  # aborted before the first step (shutdown)
        choices = [{"index": i, "message": {"role": "assistant", "content": ""}, "logprobs": None,
                    "finish_reason": "abort", "stop_reason": None} for i in range(plan.body.n)]
    num_prompt_tokens = len(plan.prompt_token_ids)
    return {"id": plan.request_id, "object": "chat.completion", "created": plan.created, "model": plan.model,
            "choices": choices, "usage": {"prompt_tokens": num_prompt_tokens, "completion_tokens": num_completion_tokens,
                                          "total_tokens": num_prompt_tokens + num_completion_tokens}}


async def _stream(state: ServerState, plan: _Plan, group: EngineGroup) -> AsyncIterator[bytes]:
    try:
        async for chunk in _stream_chunks(state, plan, group):
            yield chunk
    finally:
        group.abort()  # a client that left mid-stream frees its pages now


async def _stream_chunks(state: ServerState, plan: _Plan, group: EngineGroup) -> AsyncIterator[bytes]:
    body = plan.body
    token_text = TokenText(state.tokenizer) if body.logprobs else None
    choices = {i: StreamingChoice(thinking=plan.thinking, tools_enabled=plan.tools_enabled) for i in range(body.n)}

    def chunk(index: int, delta: dict[str, Any], *, finish_reason: str | None = None,
              logprobs: dict[str, Any] | None = None) -> bytes:
        return event({"id": plan.request_id, "object": "chat.completion.chunk", "created": plan.created,
                      "model": plan.model, "choices": [{"index": index, "delta": delta, "logprobs": logprobs,
                                                         "finish_reason": finish_reason}]})

    # OpenAI opens every choice with the role before any model output arrives.
    for index, choice in choices.items():
        yield chunk(index, choice.role_delta() or {})
    async for output in group.outputs():
        outputs = output.outputs or []
        for out in outputs:
            choice = choices[out.index]
            if choice.finished:
                continue
            finished = out.finish_reason is not None
            text = strip_eos(out.text) if finished else out.text
            new_text = text[choice.num_chars:]
            choice.num_chars = len(text)
            new_ids = out.token_ids[choice.num_tokens:]
            logprobs = None
            if token_text is not None and new_ids:
                records = (out.logprobs or [])[choice.num_tokens:]
                logprobs = {"content": chat_logprobs(token_text, new_ids, records[: len(new_ids)],
                                                     num_top=body.top_logprobs or 0)}
            choice.num_tokens = choice.completion_tokens = len(out.token_ids)
            if not finished:
                delta = choice.feed(new_text) if new_text else {}
                if delta or logprobs is not None:
                    yield chunk(out.index, delta, logprobs=logprobs)
                continue
            deltas, reason = choice.finish(new_text, out.finish_reason)
            for i, delta in enumerate(deltas):
                yield chunk(out.index, delta, logprobs=logprobs if i == 0 else None)
            if not deltas and logprobs is not None:
                yield chunk(out.index, {}, logprobs=logprobs)
            yield chunk(out.index, {}, finish_reason=reason)
        if output.finished:
            for index, choice in choices.items():  # aborted before any output for this choice
                if not choice.finished:
                    choice.finished = True
                    yield chunk(index, {}, finish_reason="abort")
    if body.stream_options is not None and body.stream_options.include_usage:
        num_prompt_tokens = len(plan.prompt_token_ids)
        num_completion = sum(c.completion_tokens for c in choices.values())
        yield event({"id": plan.request_id, "object": "chat.completion.chunk", "created": plan.created,
                     "model": plan.model, "choices": [],
                     "usage": {"prompt_tokens": num_prompt_tokens, "completion_tokens": num_completion,
                               "total_tokens": num_prompt_tokens + num_completion}})
    yield DONE
