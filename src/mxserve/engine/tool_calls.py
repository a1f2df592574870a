"""Reading a DeepSeek-V4 assistant turn back: reasoning, content and DSML tool calls.

The model writes (after the prompt's `<｜Assistant｜><think>` or `<｜Assistant｜></think>`)::

    [reasoning </think>] content [\\n\\n<｜DSML｜tool_calls> ... </｜DSML｜tool_calls>] [EOS]

`parse_assistant_output` splits a completed turn; `StreamingAssistantParser` does the same for a
stream of text deltas (reasoning and content stream out, tool calls come at the end). The DSML
grammar is the one `mxserve.engine.prompt.dsml` writes: each parameter is
`<｜DSML｜parameter name="k" string="true|false">value</｜DSML｜parameter>`; `string="true"`
values are taken as they are, `string="false"` values are JSON. Arguments are returned as one
JSON-object string, as OpenAI's `function.arguments`.

Detokenize with special tokens kept: `｜DSML｜`, `<think>` and `</think>` are vocabulary entries,
and a decode that skips special tokens may drop them.

Malformed tool-call markup raises `ToolCallParseError` (a ValueError) when `strict`; otherwise
the turn is returned with the raw text as content and no tool calls, so a client still sees
what the model wrote. No torch here.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from mxserve.engine.prompt.templates import (
    EOS,
    INVOKE_CLOSE,
    INVOKE_OPEN_PREFIX,
    PARAMETER_CLOSE,
    PARAMETER_OPEN_PREFIX,
    THINK_END,
    THINK_START,
    TOOL_CALLS_CLOSE,
    TOOL_CALLS_OPEN,
    TOOL_CALLS_SEPARATOR,
)


class ToolCallParseError(ValueError):
    """The DSML tool-call block is malformed; the message says where."""


@dataclass(frozen=True)
class ParsedToolCall:
    name: str
    arguments: str  # a JSON object, e.g. '{"location": "Beijing"}'


@dataclass(frozen=True)
class ParsedAssistantOutput:
    content: str
    reasoning_content: str | None  # None in chat mode
    tool_calls: tuple[ParsedToolCall, ...] = ()


_INVOKE_HEAD = re.compile(r'\s*name="([^"]*)"\s*>')
_PARAM_HEAD = re.compile(r'\s*name="([^"]*)"\s+string="(true|false)"\s*>')


def parse_tool_calls_block(block: str) -> list[ParsedToolCall]:
    """Parse text that starts with `<｜DSML｜tool_calls>` and ends with its closing tag (trailing
    whitespace allowed). Whitespace between tags is ignored; parameter values are kept exactly."""
    pos = _expect(block, 0, TOOL_CALLS_OPEN)
    calls: list[ParsedToolCall] = []
    while True:
        pos = _skip_ws(block, pos)
        if block.startswith(TOOL_CALLS_CLOSE, pos):
            pos += len(TOOL_CALLS_CLOSE)
            break
        pos = _expect(block, pos, INVOKE_OPEN_PREFIX)
        head = _INVOKE_HEAD.match(block, pos)
        if head is None:
            raise ToolCallParseError(f"malformed invoke tag at offset {pos}: {block[pos : pos + 40]!r}")
        name, pos = head.group(1), head.end()
        if not name:
            raise ToolCallParseError(f"invoke with an empty name at offset {pos}")
        arguments: dict[str, Any] = {}
        while True:
            pos = _skip_ws(block, pos)
            if block.startswith(INVOKE_CLOSE, pos):
                pos += len(INVOKE_CLOSE)
                break
            pos = _expect(block, pos, PARAMETER_OPEN_PREFIX)
            head = _PARAM_HEAD.match(block, pos)
            if head is None:
                raise ToolCallParseError(
                    f"malformed parameter tag at offset {pos}: {block[pos : pos + 40]!r}"
                )
            key, is_string, pos = head.group(1), head.group(2) == "true", head.end()
            end = block.find(PARAMETER_CLOSE, pos)
            if end < 0:
                raise ToolCallParseError(f"parameter {key!r} of {name!r} is not closed")
            raw, pos = block[pos:end], end + len(PARAMETER_CLOSE)
            if key in arguments:
                raise ToolCallParseError(f"duplicate parameter {key!r} in call to {name!r}")
            if is_string:
                arguments[key] = raw
            else:
                try:
                    arguments[key] = json.loads(raw)
                except json.JSONDecodeError as exc:
                    raise ToolCallParseError(
                        f'parameter {key!r} of {name!r} has string="false" but is not JSON: {raw!r} ({exc})'
                    ) from None
        calls.append(ParsedToolCall(name, json.dumps(arguments, ensure_ascii=False)))
    rest = block[pos:].strip()
    if rest and rest != EOS:
        raise ToolCallParseError(f"unexpected text after the tool-call block: {rest[:40]!r}")
    return calls


def _skip_ws(text: str, pos: int) -> int:
    while pos < len(text) and text[pos].isspace():
        pos += 1
    return pos


def _expect(text: str, pos: int, token: str) -> int:
    if not text.startswith(token, pos):
        raise ToolCallParseError(f"expected {token!r} at offset {pos}, found {text[pos : pos + 40]!r}")
    return pos + len(token)


def split_reasoning(text: str) -> tuple[str, str | None]:
    """Thinking mode: `(reasoning, rest after </think>)`; rest is None while `</think>` has not
    appeared (the whole text is still reasoning). A leading `<think>` is dropped."""
    if text.startswith(THINK_START):
        text = text[len(THINK_START) :]
    end = text.find(THINK_END)
    if end < 0:
        return text, None
    return text[:end], text[end + len(THINK_END) :]


def parse_assistant_output(text: str, *, thinking: bool, strict: bool = False) -> ParsedAssistantOutput:
    """Split a completed assistant turn into content, reasoning and tool calls.

    text: what the model generated after the prompt (EOS text at the end is ignored).
    thinking: the request ran in thinking mode; without `</think>` the whole text is reasoning
        (a turn cut short by max_tokens).
    strict: raise ToolCallParseError on malformed DSML instead of falling back to plain content.
    """
    if text.endswith(EOS):
        text = text[: -len(EOS)]
    reasoning: str | None = None
    rest: str | None = text
    if thinking:
        reasoning, rest = split_reasoning(text)
        if rest is None:
            return ParsedAssistantOutput(content="", reasoning_content=reasoning)
    start = rest.find(TOOL_CALLS_OPEN)
    if start < 0:
        return ParsedAssistantOutput(content=rest, reasoning_content=reasoning)
    content = rest[:start]
    if content.endswith(TOOL_CALLS_SEPARATOR):
        content = content[: -len(TOOL_CALLS_SEPARATOR)]
    try:
        calls = parse_tool_calls_block(rest[start:])
    except ToolCallParseError:
        if strict:
            raise
        return ParsedAssistantOutput(content=rest, reasoning_content=reasoning)
    return ParsedAssistantOutput(content=content, reasoning_content=reasoning, tool_calls=tuple(calls))


# ---------------------------------------------------------------- streaming
@dataclass(frozen=True)
class StreamDelta:
    reasoning: str = ""
    content: str = ""


class StreamingAssistantParser:
    """Route a stream of text deltas into reasoning and content; collect tool calls at the end.

    Text that might be the start of `</think>` or of the tool-call block is held back until the
    following deltas decide it. Once the block starts, everything after it is buffered and parsed
    by `finish()`, which returns the whole `ParsedAssistantOutput`.
    """

    def __init__(self, *, thinking: bool, strict: bool = False) -> None:
        self._thinking = thinking
        self._strict = strict
        self._in_reasoning = thinking
        self._held = ""  # undecided text of the current phase
        self._block: str | None = None  # the tool-call block, once it has started
        self._text: list[str] = []  # everything fed, for finish()

    def feed(self, delta: str) -> StreamDelta:
        self._text.append(delta)
        if self._block is not None:
            self._block += delta
            return StreamDelta()
        buf = self._held + delta
        reasoning = ""
        if self._in_reasoning:
            if not self._text[:-1] and buf.startswith(THINK_START):
                buf = buf[len(THINK_START) :]
            end = buf.find(THINK_END)
            if end < 0:
                emit, self._held = _hold_marker_prefix(buf, (THINK_END,))
                return StreamDelta(reasoning=emit)
            reasoning, buf = buf[:end], buf[end + len(THINK_END) :]
            self._in_reasoning = False
        marker = TOOL_CALLS_SEPARATOR + TOOL_CALLS_OPEN
        start = buf.find(TOOL_CALLS_OPEN)
        if start >= 0:
            content = buf[:start]
            if content.endswith(TOOL_CALLS_SEPARATOR):
                content = content[: -len(TOOL_CALLS_SEPARATOR)]
            self._block, self._held = buf[start:], ""
            return StreamDelta(reasoning=reasoning, content=content)
        emit, self._held = _hold_marker_prefix(buf, (marker, TOOL_CALLS_OPEN))
        return StreamDelta(reasoning=reasoning, content=emit)

    def finish(self) -> tuple[StreamDelta, ParsedAssistantOutput]:
        """The held-back tail as a last delta, and the parse of the whole turn.

        If the tool-call block turns out malformed (non-strict), the block text is returned as a
        final content delta, matching `ParsedAssistantOutput.content`."""
        parsed = parse_assistant_output("".join(self._text), thinking=self._thinking, strict=self._strict)
        held, self._held = self._held, ""
        if held.endswith(EOS):
            held = held[: -len(EOS)]
        if self._block is not None:
            tail = (
                "" if parsed.tool_calls or not self._block else _malformed_tail(parsed.content, self._block)
            )
            return StreamDelta(content=tail), parsed
        if self._in_reasoning:
            return StreamDelta(reasoning=held), parsed
        return StreamDelta(content=held), parsed


def _malformed_tail(content: str, block: str) -> str:
    """Non-strict fallback: the content is the raw text; stream the part not yet sent."""
    if block.endswith(EOS):
        block = block[: -len(EOS)]
    # the separator before the block was withheld from the stream; send it back with the block
    return (TOOL_CALLS_SEPARATOR if content.endswith(TOOL_CALLS_SEPARATOR + block) else "") + block


def _hold_marker_prefix(buf: str, markers: tuple[str, ...]) -> tuple[str, str]:
    """Split `buf` into (text to emit, suffix that may be the start of a marker)."""
    longest = max(len(m) for m in markers) - 1
    for k in range(min(len(buf), longest), 0, -1):
        if any(m.startswith(buf[-k:]) for m in markers):
            return buf[:-k], buf[-k:]
    return buf, ""
