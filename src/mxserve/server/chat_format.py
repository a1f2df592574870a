"""Model text → OpenAI chat messages and stream deltas (pure functions and a small state machine,
so tests can feed synthetic model output, e.g. a DSML tool call the tiny model never writes).

The engine decodes chat output with special tokens kept (the parser needs `</think>` and
`｜DSML｜`), so the EOS text that ends a finished turn is stripped here. Tool calls are parsed only
when the request offered tools; otherwise DSML-looking text stays content. In thinking mode a
turn cut short before `</think>` is all reasoning (content is then null).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from mxserve.engine.prompt.templates import EOS, THINK_END, THINK_START
from mxserve.engine.tool_calls import (
    ParsedAssistantOutput,
    ParsedToolCall,
    StreamingAssistantParser,
    parse_assistant_output,
    split_reasoning,
)


def strip_eos(text: str) -> str:
    return text[: -len(EOS)] if text.endswith(EOS) else text


def new_tool_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def parse_turn(text: str, *, thinking: bool, tools_enabled: bool) -> ParsedAssistantOutput:
    """Split a finished turn; DSML is parsed only when the request offered tools."""
    text = strip_eos(text)
    if tools_enabled:
        return parse_assistant_output(text, thinking=thinking)
    if not thinking:
        return ParsedAssistantOutput(content=text, reasoning_content=None)
    reasoning, rest = split_reasoning(text)
    return ParsedAssistantOutput(content=rest or "", reasoning_content=reasoning)


def tool_call_objects(calls: tuple[ParsedToolCall, ...], *, with_index: bool) -> list[dict[str, Any]]:
    objects = []
    for index, call in enumerate(calls):
        obj: dict[str, Any] = {"id": new_tool_call_id(), "type": "function",
                               "function": {"name": call.name, "arguments": call.arguments}}
        if with_index:  # stream deltas name the slot they fill
            obj = {"index": index, **obj}
        objects.append(obj)
    return objects


def chat_message(parsed: ParsedAssistantOutput) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": parsed.content or None}
    if parsed.reasoning_content is not None:
        message["reasoning_content"] = parsed.reasoning_content
    if parsed.tool_calls:
        message["tool_calls"] = tool_call_objects(parsed.tool_calls, with_index=False)
    if not parsed.tool_calls and message["content"] is None and parsed.reasoning_content is None:
        message["content"] = ""  # a plain empty answer is "", not null
    return message


def finish_reason_of(parsed: ParsedAssistantOutput, engine_reason: str | None) -> str | None:
    return "tool_calls" if parsed.tool_calls else engine_reason


@dataclass
class StreamingChoice:
    """One choice of a streamed chat completion: text deltas in, OpenAI `delta` objects out.

    With tools offered, the engine's `StreamingAssistantParser` routes reasoning/content and
    withholds the DSML block, whose calls go out as one `tool_calls` delta at the end. Without
    tools only `</think>` matters, and a possible partial `</think>` is held until decided."""

    thinking: bool
    tools_enabled: bool
    num_chars: int = 0  # characters of the engine text already consumed
    num_tokens: int = 0  # tokens already reported (logprobs)
    completion_tokens: int = 0
    finished: bool = False
    _started: bool = False
    _parser: StreamingAssistantParser | None = field(init=False, default=None)
    _in_reasoning: bool = field(init=False, default=False)
    _held: str = field(init=False, default="")
    _seen_any: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        if self.tools_enabled:
            self._parser = StreamingAssistantParser(thinking=self.thinking)
        self._in_reasoning = self.thinking

    def role_delta(self) -> dict[str, Any] | None:
        """The first delta OpenAI sends for a choice: the role and empty content."""
        if self._started:
            return None
        self._started = True
        return {"role": "assistant", "content": ""}

    def feed(self, text: str) -> dict[str, Any]:
        """Delta for `text` (new engine text of the turn, EOS already stripped); may be empty."""
        if self._parser is not None:
            delta = self._parser.feed(text)
            return _delta(delta.reasoning, delta.content)
        if not self._in_reasoning:
            return _delta("", text)
        buf = self._held + text
        if not self._seen_any and buf.startswith(THINK_START):
            buf = buf[len(THINK_START):]
        self._seen_any = self._seen_any or bool(text)
        end = buf.find(THINK_END)
        if end >= 0:
            self._in_reasoning, self._held = False, ""
            return _delta(buf[:end], buf[end + len(THINK_END):])
        keep = next((k for k in range(min(len(buf), len(THINK_END) - 1), 0, -1) if THINK_END.startswith(buf[-k:])), 0)
        self._held = buf[len(buf) - keep:]
        return _delta(buf[: len(buf) - keep], "")

    def finish(self, final_text: str, engine_reason: str | None) -> tuple[list[dict[str, Any]], str | None]:
        """Deltas for the end of the turn (the last text, held text, tool calls) and the finish reason."""
        deltas = [self.feed(final_text)] if final_text else []
        self.finished = True
        if self._parser is None:
            held, self._held = self._held, ""
            deltas.append(_delta(held, "") if self._in_reasoning else _delta("", held))
            return [d for d in deltas if d], engine_reason
        tail, parsed = self._parser.finish()
        deltas.append(_delta(tail.reasoning, tail.content))
        reason = engine_reason
        if parsed.tool_calls:
            deltas.append({"tool_calls": tool_call_objects(parsed.tool_calls, with_index=True)})
            reason = "tool_calls"
        return [d for d in deltas if d], reason


def _delta(reasoning: str, content: str) -> dict[str, Any]:
    delta: dict[str, Any] = {}
    if reasoning:
        delta["reasoning_content"] = reasoning
    if content:
        delta["content"] = content
    return delta
