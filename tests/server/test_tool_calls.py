"""Tool calls: the response builders on synthetic DSML output (the tiny model never writes a
call on its own), whole and streamed at every chunk boundary, and a round trip in which the parsed
call and a tool result go back to the live server as conversation history."""

from __future__ import annotations

import json

import pytest

from mxserve.engine.prompt.dsml import render_tool_calls
from mxserve.engine.prompt.templates import EOS, THINK_END
from mxserve.server.chat_format import StreamingChoice, chat_message, finish_reason_of, parse_turn
from tests.server.live import MODEL_NAME

CALLS = [("get_verse", {"book": "Genesis", "chapter": 1, "verses": [1, 2]}), ("count_words", {})]
DSML_TURN = "Let me look.\n\n" + render_tool_calls(CALLS) + EOS
THINKING_TURN = "The user wants a verse." + THINK_END + DSML_TURN
TOOLS = [{"type": "function", "function": {"name": "get_verse", "parameters": {"type": "object"}}},
         {"type": "function", "function": {"name": "count_words", "parameters": {"type": "object"}}}]


def _expected_calls() -> list[tuple[str, dict]]:
    return [(name, args) for name, args in CALLS]


@pytest.mark.parametrize("thinking, text", [(False, DSML_TURN), (True, THINKING_TURN)])
def test_whole_turn_becomes_tool_calls(thinking, text):
    parsed = parse_turn(text, thinking=thinking, tools_enabled=True)
    message = chat_message(parsed)
    assert finish_reason_of(parsed, "stop") == "tool_calls"
    assert message["content"] == "Let me look."
    assert message.get("reasoning_content") == ("The user wants a verse." if thinking else None)
    got = [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in message["tool_calls"]]
    assert got == _expected_calls()
    assert all(c["type"] == "function" and c["id"].startswith("call_") for c in message["tool_calls"])


def test_without_tools_dsml_stays_content():
    parsed = parse_turn(DSML_TURN, thinking=False, tools_enabled=False)
    assert not parsed.tool_calls and parsed.content == DSML_TURN[: -len(EOS)]


def _stream(text: str, size: int, *, thinking: bool, tools: bool) -> tuple[str, str, list[dict], str | None]:
    choice = StreamingChoice(thinking=thinking, tools_enabled=tools)
    assert choice.role_delta() == {"role": "assistant", "content": ""}
    body = text[: -len(EOS)]  # the server strips EOS from the finished text
    pieces = [body[i:i + size] for i in range(0, len(body), size)]
    deltas = [choice.feed(p) for p in pieces[:-1]]
    tail, reason = choice.finish(pieces[-1] if pieces else "", "stop")
    deltas += tail
    content = "".join(d.get("content", "") for d in deltas)
    reasoning = "".join(d.get("reasoning_content", "") for d in deltas)
    calls = [c for d in deltas for c in d.get("tool_calls", [])]
    return content, reasoning, calls, reason


@pytest.mark.parametrize("size", [1, 2, 3, 7, 50, 10_000])
@pytest.mark.parametrize("thinking", [False, True])
def test_streamed_turn_at_any_chunking(size, thinking):
    text = THINKING_TURN if thinking else DSML_TURN
    content, reasoning, calls, reason = _stream(text, size, thinking=thinking, tools=True)
    assert content == "Let me look." and reason == "tool_calls"
    assert reasoning == ("The user wants a verse." if thinking else "")
    assert [c["index"] for c in calls] == [0, 1]
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == _expected_calls()


@pytest.mark.parametrize("size", [1, 4, 10_000])
def test_streamed_reasoning_without_tools(size):
    content, reasoning, calls, reason = _stream("why" + THINK_END + "because" + EOS, size, thinking=True, tools=False)
    assert (reasoning, content, calls, reason) == ("why", "because", [], "stop")


def test_tool_call_round_trip(openai_client):
    """The parsed call and its result go back as history: the server must encode them (an
    assistant turn with DSML, a tool result block) and answer."""
    message = chat_message(parse_turn(DSML_TURN, thinking=False, tools_enabled=True))
    history = [
        {"role": "user", "content": "Read Genesis 1:1-2."},
        {"role": "assistant", "content": message["content"], "tool_calls": message["tool_calls"]},
        *({"role": "tool", "tool_call_id": c["id"], "content": "In the beginning God created the heaven"}
          for c in message["tool_calls"]),
    ]
    out = openai_client.chat.completions.create(model=MODEL_NAME, messages=history, tools=TOOLS, max_tokens=3,
                                                temperature=0, reasoning_effort="none")
    assert out.choices[0].finish_reason in ("length", "stop", "tool_calls")
    assert out.usage.prompt_tokens > 100
    # a tool result whose id matches no call is the client's mistake: 400, not 500
    bad = [*history[:2], {"role": "tool", "tool_call_id": "call_unknown", "content": "x"}]
    import openai

    with pytest.raises(openai.BadRequestError):
        openai_client.chat.completions.create(model=MODEL_NAME, messages=bad, tools=TOOLS, max_tokens=2)
