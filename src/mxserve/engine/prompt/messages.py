"""OpenAI-style chat messages -> validated `Turn`s ready to render (DeepSeek-V4 spec §10).

This module owns the preprocessing half of the prompt encoder:

1. validate every message and read it into a `Turn` (clear `ValueError`s: unknown role, missing
   content, malformed tool calls, a `tool` message with no tool call before it, ...);
2. attach request-level `tools` / `response_format` to the first system message (one is inserted
   at the front when there is none);
3. merge `tool` messages into user turns as tool-result blocks -- DeepSeek-V4 has no tool role --
   and join a user message onto a directly preceding user turn (blocks joined by a blank line);
4. order the tool results of a user turn by the tool-call order of the assistant before it;
5. drop history reasoning (and history developer turns) when the encoder asks for it.

Rendering (which string each turn becomes) lives in `encoding.py`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from mxserve.engine.prompt.templates import TASK_TOKENS

ROLES = ("system", "developer", "user", "assistant", "tool", "latest_reminder")


@dataclass(frozen=True)
class ToolCall:
    """One call an assistant turn made: the function name and its decoded JSON-object arguments."""

    name: str
    arguments: dict[str, Any]  # decoded from the OpenAI `arguments` JSON string, key order kept
    id: str | None = None  # OpenAI `tool_call_id` it answers to; orders the tool results


@dataclass(frozen=True)
class UserBlock:
    """One block of a user turn: plain text, or the result of one tool call."""

    kind: str  # "text" | "tool_result"
    text: str
    tool_call_id: str | None = None  # tool results only


@dataclass(frozen=True)
class Turn:
    """One message after validation and tool-message merging (roles: system, developer, user,
    assistant, latest_reminder -- `tool` messages have become user `tool_result` blocks)."""

    role: str
    content: str = ""  # system/developer/assistant/latest_reminder text
    blocks: tuple[UserBlock, ...] = ()  # user turns only
    tools: tuple[dict[str, Any], ...] = ()  # function schemas (system/developer)
    response_format: Any = None  # system/developer; rendered as JSON
    tool_calls: tuple[ToolCall, ...] = ()  # assistant
    reasoning: str = ""  # assistant `reasoning_content` (or `reasoning`)
    task: str | None = None  # internal quick-instruction task; see templates.TASK_TOKENS
    index: int = field(default=-1, compare=False)  # position in the caller's list, for errors


# ---------------------------------------------------------------- reading one message
def _text(value: Any, where: str, *, parts_joiner: str = "\n") -> str:
    """A message `content`: a string, or a list of OpenAI text parts joined by `parts_joiner`."""
    if isinstance(value, str):
        return value
    if isinstance(value, Sequence) and not isinstance(value, (bytes, bytearray)):
        texts = []
        for part in value:
            if isinstance(part, str):
                texts.append(part)
            elif (
                isinstance(part, Mapping) and part.get("type") == "text" and isinstance(part.get("text"), str)
            ):
                texts.append(part["text"])
            else:
                kind = part.get("type") if isinstance(part, Mapping) else type(part).__name__
                raise ValueError(
                    f"{where}: unsupported content part of type {kind!r} (only text is supported)"
                )
        return parts_joiner.join(texts)
    raise ValueError(f"{where}: content must be a string or a list of text parts, got {type(value).__name__}")


def _function_schema(tool: Any, where: str) -> dict[str, Any]:
    """An OpenAI tool `{"type": "function", "function": {...}}` or a bare function schema."""
    if not isinstance(tool, Mapping):
        raise ValueError(f"{where}: a tool must be an object, got {type(tool).__name__}")
    function = tool.get("function", tool)
    if not isinstance(function, Mapping) or not isinstance(function.get("name"), str) or not function["name"]:
        raise ValueError(f"{where}: a tool needs a function with a non-empty string `name`: {tool!r}")
    return dict(function)


def _tool_call(call: Any, where: str) -> ToolCall:
    if not isinstance(call, Mapping):
        raise ValueError(f"{where}: a tool call must be an object, got {type(call).__name__}")
    function = call.get("function", call)
    name = function.get("name") if isinstance(function, Mapping) else None
    if not isinstance(name, str) or not name:
        raise ValueError(f"{where}: a tool call needs a function with a non-empty string `name`: {call!r}")
    raw = function.get("arguments", {})
    if raw is None:
        raw = {}
    if isinstance(raw, str):
        try:
            arguments = json.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError as exc:
            raise ValueError(f"{where}: tool call {name!r} arguments are not valid JSON: {exc}") from None
    else:
        arguments = raw
    if not isinstance(arguments, Mapping):
        raise ValueError(f"{where}: tool call {name!r} arguments must be a JSON object, got {arguments!r}")
    call_id = call.get("id")
    return ToolCall(name=name, arguments=dict(arguments), id=str(call_id) if call_id else None)


def _read(message: Any, index: int) -> Turn | UserBlock:
    """One caller message -> a Turn, or a `tool_result` UserBlock for a `tool` message."""
    where = f"messages[{index}]"
    if not isinstance(message, Mapping):
        raise ValueError(f"{where}: a message must be an object, got {type(message).__name__}")
    role = message.get("role")
    if role not in ROLES:
        raise ValueError(f"{where}: unknown role {role!r}; expected one of {list(ROLES)}")
    where = f"{where} ({role})"
    content = message.get("content")
    task = message.get("task")
    if task is not None and task not in TASK_TOKENS:
        raise ValueError(f"{where}: unknown task {task!r}; expected one of {sorted(TASK_TOKENS)}")

    if role == "tool":
        if content is None:
            raise ValueError(f"{where}: a tool message needs `content`")
        call_id = message.get("tool_call_id")
        # tool results made of several parts join them by a blank line, as the reference does
        text = _text(content, where, parts_joiner="\n\n")
        return UserBlock("tool_result", text, str(call_id) if call_id else None)

    tools: tuple[dict[str, Any], ...] = ()
    if message.get("tools"):
        if role not in ("system", "developer"):
            raise ValueError(f"{where}: only system or developer messages may carry `tools`")
        tools = tuple(_function_schema(t, where) for t in message["tools"])
    response_format = message.get("response_format")
    if response_format is not None and role not in ("system", "developer"):
        raise ValueError(f"{where}: only system or developer messages may carry `response_format`")

    if role == "assistant":
        calls = tuple(_tool_call(c, where) for c in (message.get("tool_calls") or ()))
        if content is None and not calls:
            raise ValueError(f"{where}: an assistant message needs `content` or `tool_calls`")
        reasoning = message.get("reasoning_content", message.get("reasoning"))
        return Turn(
            role=role,
            content="" if content is None else _text(content, where),
            tool_calls=calls,
            reasoning="" if reasoning is None else _text(reasoning, where),
            task=task,
            index=index,
        )
    if content is None and not (role == "system" and (tools or response_format is not None)):
        raise ValueError(f"{where}: missing `content`")
    text = "" if content is None else _text(content, where)
    if role == "developer" and not text:
        raise ValueError(f"{where}: a developer message needs non-empty `content`")
    if role == "user":
        return Turn(role=role, blocks=(UserBlock("text", text),), task=task, index=index)
    return Turn(role=role, content=text, tools=tools, response_format=response_format, task=task, index=index)


# ---------------------------------------------------------------- the whole conversation
def prepare_turns(
    messages: Sequence[Mapping[str, Any]],
    *,
    tools: Sequence[Any] | None = None,
    response_format: Any = None,
) -> list[Turn]:
    """Validate `messages` and return the merged, ordered turns (steps 1-4 of the module doc)."""
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise ValueError(f"messages must be a list of message objects, got {type(messages).__name__}")
    if not messages:
        raise ValueError("messages is empty: at least one message is needed")

    turns: list[Turn] = []
    last_calls: tuple[ToolCall, ...] | None = None  # calls of the assistant the tool messages answer
    for index, message in enumerate(messages):
        item = _read(message, index)
        if isinstance(item, UserBlock):  # a `tool` message
            if last_calls is None:
                raise ValueError(
                    f"messages[{index}] (tool): no assistant message with `tool_calls` comes before it "
                    "(tool messages must directly follow the assistant turn that made the calls)"
                )
            ids = {c.id for c in last_calls if c.id}
            if item.tool_call_id and ids and item.tool_call_id not in ids:
                raise ValueError(
                    f"messages[{index}] (tool): tool_call_id {item.tool_call_id!r} matches none of the "
                    f"preceding assistant's tool calls {sorted(ids)}"
                )
            prev = turns[-1] if turns else None
            if prev is not None and prev.role == "user":
                turns[-1] = replace(prev, blocks=(*prev.blocks, item))
            else:
                turns.append(Turn(role="user", blocks=(item,), index=index))
            continue
        last_calls = item.tool_calls if item.role == "assistant" and item.tool_calls else None
        prev = turns[-1] if turns else None
        if item.role == "user" and prev is not None and prev.role == "user" and prev.task is None:
            turns[-1] = replace(prev, blocks=(*prev.blocks, *item.blocks))  # its task, if any, is not kept
        else:
            turns.append(item)

    if tools or response_format is not None:
        turns = _attach_request_sections(turns, tools or (), response_format)
    return _order_tool_results(turns)


def _attach_request_sections(turns: list[Turn], tools: Sequence[Any], response_format: Any) -> list[Turn]:
    """Request-level tools / response_format go on the first system message (vLLM's rule); a
    bare system turn is inserted at the front when the conversation has none."""
    schemas = tuple(_function_schema(t, "tools") for t in tools)
    for i, turn in enumerate(turns):
        if turn.role == "system":
            if (schemas and turn.tools) or (response_format is not None and turn.response_format is not None):
                raise ValueError(
                    f"messages[{turn.index}] (system) already carries tools/response_format; "
                    "pass them either on the message or on the request, not both"
                )
            turns = list(turns)
            turns[i] = replace(
                turn,
                tools=schemas or turn.tools,
                response_format=response_format if response_format is not None else turn.response_format,
            )
            return turns
    return [Turn(role="system", tools=schemas, response_format=response_format), *turns]


def _order_tool_results(turns: list[Turn]) -> list[Turn]:
    """Put the tool results of each user turn in the tool-call order of the latest assistant turn
    that made calls. Results whose id is unknown sort as position 0; the sort is stable; text
    blocks keep their places."""
    order: dict[str, int] = {}
    out = []
    for turn in turns:
        if turn.role == "assistant" and turn.tool_calls:
            order = {c.id: i for i, c in enumerate(turn.tool_calls) if c.id}
        elif turn.role == "user" and order:
            results = [b for b in turn.blocks if b.kind == "tool_result"]
            if len(results) > 1:
                ranked = iter(sorted(results, key=lambda b: order.get(b.tool_call_id or "", 0)))
                blocks = tuple(next(ranked) if b.kind == "tool_result" else b for b in turn.blocks)
                turn = replace(turn, blocks=blocks)
        out.append(turn)
    return out


def last_user_index(turns: Sequence[Turn]) -> int:
    """Index of the last user or developer turn; -1 when there is none."""
    for i in range(len(turns) - 1, -1, -1):
        if turns[i].role in ("user", "developer"):
            return i
    return -1


def drop_history_thinking(turns: Sequence[Turn]) -> list[Turn]:
    """Before the last user/developer turn: assistant turns lose their reasoning and developer
    turns are dropped; system, user and latest_reminder turns stay. From it on, all stays."""
    last = last_user_index(turns)
    out = []
    for i, turn in enumerate(turns):
        if i >= last or turn.role in ("system", "user", "latest_reminder"):
            out.append(turn)
        elif turn.role == "assistant":
            out.append(replace(turn, reasoning=""))
        # developer turns before the last user turn are dropped
    return out
