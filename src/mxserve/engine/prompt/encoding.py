"""DeepSeek-V4 prompt encoding: chat messages -> the prompt string (spec §10, dsv4-0731.md §5).

DeepSeek-V4 ships no Jinja template; this restates the rules of DeepSeek's `encoding_dsv4.py`:

* The prompt starts with BOS. In thinking mode the generation's effort paragraph follows BOS.
* system: its text as is (no role token), then `\\n\\n` + the tools block if it carries tools,
  then `\\n\\n` + the response-format block if it carries one.
* developer: `<｜User｜>` + text (+ tools / response format as for system).
* user: `<｜User｜>` + its blocks joined by a blank line; a tool result renders as
  `<tool_result>...</tool_result>`.
* latest_reminder: `<｜latest_reminder｜>` + text.
* assistant: [reasoning + `</think>`] + text + [`\\n\\n` + DSML tool-call block] + EOS. The
  reasoning part is written only in thinking mode, when the turn is not a task answer, and
  either reasoning is kept (`drop_thinking` off) or the turn comes after the last user turn.
* After a user/developer turn that is last or is followed by an assistant/latest_reminder turn,
  the generation prompt `<｜Assistant｜>` + (`<think>` or `</think>`) is written: `<think>` in
  thinking mode when reasoning is kept or the turn is the last user turn, `</think>` otherwise.
  A turn with a `task` writes its task token instead (`action`: `<｜Assistant｜>` + think token +
  `<｜action｜>`).
* `drop_thinking` (default on) is switched off whenever any turn carries tools. When it is on in
  thinking mode, history before the last user turn loses assistant reasoning and developer turns.

`encode_messages` is pure Python (no torch); tokenize the result with `add_special_tokens=False`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from mxserve.engine.prompt.dsml import render_tool_calls, to_json
from mxserve.engine.prompt.effort import effort_prefix
from mxserve.engine.prompt.messages import Turn, drop_history_thinking, last_user_index, prepare_turns
from mxserve.engine.prompt.templates import (
    ASSISTANT,
    BOS,
    EOS,
    LATEST_REMINDER,
    RESPONSE_FORMAT_TEMPLATE,
    SECTION_SEPARATOR,
    TASK_TOKENS,
    THINK_END,
    THINK_START,
    TOOL_CALLS_SEPARATOR,
    TOOL_RESULT_CLOSE,
    TOOL_RESULT_OPEN,
    TOOLS_TEMPLATE,
    USER,
    USER_BLOCK_SEPARATOR,
)


def encode_messages(
    messages: Sequence[Mapping[str, Any]],
    *,
    thinking: bool,
    reasoning_effort: str | None,
    generation: str,
    tools: Sequence[Any] | None = None,
    response_format: Any = None,
    drop_thinking: bool = True,
) -> str:
    """Build the DeepSeek-V4 prompt string for `messages`.

    messages: OpenAI-style dicts; roles system, developer, user, assistant (`content`,
        `tool_calls`, `reasoning_content` or `reasoning`), tool (`content`, `tool_call_id`) and
        latest_reminder. System/developer messages may carry `tools` / `response_format`.
    thinking: thinking mode (`<think>` opens the answer) or chat mode (`</think>`).
    reasoning_effort: None, "low", "high" or "max"; its meaning depends on `generation`
        (see `effort.EFFORT_PREFIXES`). Only thinking mode writes a paragraph.
    generation: "preview" or "0731" (or a `CheckpointLayout`).
    tools / response_format: request-level; attached to the first system message.
    drop_thinking: drop history reasoning (ignored -- treated as off -- when tools are present).

    Returns the prompt, BOS included. Raises ValueError for malformed messages or an unknown
    effort/generation.
    """
    prefix = effort_prefix(generation, reasoning_effort, thinking=thinking)
    turns = prepare_turns(messages, tools=tools, response_format=response_format)

    drop = drop_thinking and not any(t.tools for t in turns)
    if thinking and drop:
        turns = drop_history_thinking(turns)
    last_user = last_user_index(turns)

    rendered = (
        _render_turn(i, turns, thinking=thinking, drop=drop, last_user=last_user) for i in range(len(turns))
    )
    return BOS + prefix + "".join(rendered)


def _sections(turn: Turn) -> str:
    """The tools and response-format sections a system/developer turn appends to its text."""
    out = ""
    if turn.tools:
        schemas = "\n".join(to_json(schema) for schema in turn.tools)
        out += SECTION_SEPARATOR + TOOLS_TEMPLATE.format(tool_schemas=schemas)
    if turn.response_format is not None:
        out += SECTION_SEPARATOR + RESPONSE_FORMAT_TEMPLATE.format(schema=to_json(turn.response_format))
    return out


def _render_turn(i: int, turns: Sequence[Turn], *, thinking: bool, drop: bool, last_user: int) -> str:
    turn = turns[i]
    if turn.role == "system":
        text = turn.content + _sections(turn)
    elif turn.role == "developer":
        text = USER + turn.content + _sections(turn)
    elif turn.role == "user":
        text = USER + USER_BLOCK_SEPARATOR.join(
            TOOL_RESULT_OPEN + b.text + TOOL_RESULT_CLOSE if b.kind == "tool_result" else b.text
            for b in turn.blocks
        )
    elif turn.role == "latest_reminder":
        text = LATEST_REMINDER + turn.content
    else:  # assistant
        answers_task = i > 0 and turns[i - 1].task is not None
        keep_reasoning = thinking and not answers_task and (not drop or i > last_user)
        text = (turn.reasoning + THINK_END) if keep_reasoning else ""
        text += turn.content
        if turn.tool_calls:
            text += TOOL_CALLS_SEPARATOR + render_tool_calls((c.name, c.arguments) for c in turn.tool_calls)
        text += EOS

    # The generation prompt follows a turn that is last or is followed by an assistant or
    # latest_reminder turn; any other successor means the conversation has not handed over yet.
    if i + 1 < len(turns) and turns[i + 1].role not in ("assistant", "latest_reminder"):
        return text
    if turn.task is not None:
        token = TASK_TOKENS[turn.task]
        if turn.task == "action":
            return text + ASSISTANT + (THINK_START if thinking else THINK_END) + token
        return text + token
    if turn.role in ("user", "developer"):
        opens_thinking = thinking and (not drop or i >= last_user)
        return text + ASSISTANT + (THINK_START if opens_thinking else THINK_END)
    return text
