"""Prompt-encoder input validation, the OpenAI reasoning_effort mapping, and rule properties."""

from __future__ import annotations

import pytest

from mxserve.engine.prompt import (
    DEFAULT_REASONING_EFFORT,
    DEFAULT_THINKING,
    encode_messages,
    map_openai_reasoning_effort,
)
from mxserve.engine.prompt.templates import BOS


def enc(messages, *, thinking=True, effort=None, generation="0731", **kw):
    return encode_messages(messages, thinking=thinking, reasoning_effort=effort, generation=generation, **kw)


# ---------------------------------------------------------------- OpenAI mapping (as vLLM)
@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("none", (False, None)),
        ("minimal", (True, "low")),
        ("low", (True, "low")),
        ("medium", (True, "low")),
        ("high", (True, "high")),
        ("xhigh", (True, "high")),
        ("max", (True, "max")),
        ("unexpected", (True, "high")),
        ("MAX", (True, "max")),
        (None, (True, "high")),
    ],
)
def test_map_openai_reasoning_effort(value, expected):
    assert map_openai_reasoning_effort(value) == expected


def test_server_default_is_thinking_high():
    assert (DEFAULT_THINKING, DEFAULT_REASONING_EFFORT) == (True, "high")
    thinking, effort = map_openai_reasoning_effort(None)
    prompt = enc([{"role": "user", "content": "Hello"}], thinking=thinking, effort=effort)
    assert prompt.startswith(BOS + "Reasoning Effort: Absolute maximum")
    thinking, effort = map_openai_reasoning_effort("none")
    assert enc([{"role": "user", "content": "Hello"}], thinking=thinking, effort=effort).endswith("</think>")


# ---------------------------------------------------------------- malformed input
def call(call_id, name="f", arguments="{}"):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


@pytest.mark.parametrize(
    ("messages", "match"),
    [
        ([], "empty"),
        ("hello", "list of message objects"),
        (["hello"], r"messages\[0\]: a message must be an object"),
        ([{"role": "robot", "content": "x"}], r"messages\[0\]: unknown role 'robot'"),
        ([{"content": "x"}], "unknown role None"),
        ([{"role": "user"}], r"messages\[0\] \(user\): missing `content`"),
        ([{"role": "system"}], r"messages\[0\] \(system\): missing `content`"),
        ([{"role": "developer", "content": ""}], "developer message needs non-empty"),
        ([{"role": "user", "content": "q"}, {"role": "assistant"}], "needs `content` or `tool_calls`"),
        ([{"role": "user", "content": 3}], "content must be a string"),
        ([{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}], "unsupported content part"),
        (
            [{"role": "tool", "content": "r"}],
            r"messages\[0\] \(tool\): no assistant message with `tool_calls`",
        ),
        (
            [
                {"role": "user", "content": "q"},
                {"role": "assistant", "content": "a"},
                {"role": "tool", "content": "r"},
            ],
            "no assistant message with `tool_calls`",
        ),
        (
            [
                {"role": "user", "content": "q"},
                {"role": "assistant", "content": "", "tool_calls": [call("c1")]},
                {"role": "tool", "tool_call_id": "c1", "content": "r"},
                {"role": "user", "content": "more"},
                {"role": "tool", "tool_call_id": "c1", "content": "r"},
            ],
            r"messages\[4\] \(tool\): no assistant message",
        ),
        (
            [
                {"role": "user", "content": "q"},
                {"role": "assistant", "content": "", "tool_calls": [call("c1")]},
                {"role": "tool", "tool_call_id": "c9", "content": "r"},
            ],
            "tool_call_id 'c9' matches none",
        ),
        (
            [
                {"role": "user", "content": "q"},
                {"role": "assistant", "content": "", "tool_calls": [call("c1")]},
                {"role": "tool", "tool_call_id": "c1"},
            ],
            "tool message needs `content`",
        ),
        (
            [
                {"role": "user", "content": "q"},
                {"role": "assistant", "tool_calls": [call("c1", arguments="{oops")]},
            ],
            "arguments are not valid JSON",
        ),
        (
            [
                {"role": "user", "content": "q"},
                {"role": "assistant", "tool_calls": [call("c1", arguments="[1]")]},
            ],
            "must be a JSON object",
        ),
        (
            [{"role": "user", "content": "q"}, {"role": "assistant", "tool_calls": [{"function": {}}]}],
            "non-empty",
        ),
        ([{"role": "user", "content": "q", "tools": [{"name": "f"}]}], "only system or developer"),
        ([{"role": "user", "content": "q", "task": "nope"}], "unknown task 'nope'"),
    ],
)
def test_malformed_messages_raise_value_error(messages, match):
    with pytest.raises(ValueError, match=match):
        enc(messages)


def test_unknown_effort_and_generation():
    hello = [{"role": "user", "content": "Hello"}]
    with pytest.raises(ValueError, match="unknown reasoning_effort 'medium'"):
        enc(hello, effort="medium")
    with pytest.raises(ValueError, match=r"unknown prompt generation 'v4\.1'"):
        enc(hello, generation="v4.1")


def test_tools_on_message_and_request_conflict():
    msgs = [{"role": "system", "content": "S", "tools": [{"name": "f"}]}, {"role": "user", "content": "q"}]
    with pytest.raises(ValueError, match="either on the message or on the request"):
        enc(msgs, tools=[{"name": "g"}])


def test_request_tools_need_a_name():
    with pytest.raises(ValueError, match="non-empty string `name`"):
        enc([{"role": "user", "content": "q"}], tools=[{"type": "function", "function": {}}])


# ---------------------------------------------------------------- properties
def test_input_messages_are_not_modified():
    msgs = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "", "reasoning_content": "r", "tool_calls": [call("c1")]},
        {"role": "tool", "tool_call_id": "c1", "content": "x"},
    ]
    snapshot = repr(msgs)
    enc(msgs, tools=[{"name": "f"}])
    assert repr(msgs) == snapshot


def test_one_bos_and_prompt_is_a_prefix_of_the_next_turn_in_chat_mode():
    # chat mode: the prompt of turn n followed by the model's answer is a prefix of turn n+1's prompt
    first = [{"role": "user", "content": "One"}]
    p1 = enc(first, thinking=False)
    answer = "Answer one."
    p2 = enc(
        [*first, {"role": "assistant", "content": answer}, {"role": "user", "content": "Two"}], thinking=False
    )
    assert p2.startswith(p1 + answer)
    assert p2.count(BOS) == 1
