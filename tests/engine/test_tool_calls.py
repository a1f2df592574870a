"""DSML tool-call parser: round trips through the encoder, reasoning split, malformed markup,
streaming."""

from __future__ import annotations

import json

import pytest

from mxserve.engine.prompt import encode_messages, render_tool_calls
from mxserve.engine.tool_calls import (
    ParsedToolCall,
    StreamingAssistantParser,
    ToolCallParseError,
    parse_assistant_output,
    parse_tool_calls_block,
)

D = "\uff5cDSML\uff5c"
EOS = "<\uff5cend\u2581of\u2581sentence\uff5c>"
A = "<\uff5cAssistant\uff5c>"

CALLS = [
    {
        "id": "c1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"location": "Beijing", "unit": "celsius"}'},
    },
    {
        "id": "c2",
        "type": "function",
        "function": {
            "name": "mixed",
            "arguments": json.dumps(
                {
                    "text": 'line 1\nline 2 <b>"q"</b> 你好 😀',
                    "n": 7,
                    "x": 1.5,
                    "ok": False,
                    "none": None,
                    "list": [1, "two", {"k": [True]}],
                    "obj": {"a": {"b": "c"}},
                    "empty": "",
                },
                ensure_ascii=False,
            ),
        },
    },
    {"id": "c3", "type": "function", "function": {"name": "now", "arguments": "{}"}},
]


def assistant_text(messages, thinking):
    """Render a conversation ending in an assistant turn; return that turn's generated text."""
    prompt = encode_messages(messages, thinking=thinking, reasoning_effort=None, generation="0731")
    opener = A + ("<think>" if thinking else "</think>")
    return prompt[prompt.rindex(opener) + len(opener) :]


@pytest.mark.parametrize("thinking", [True, False])
@pytest.mark.parametrize("content", ["", "Let me look that up."])
def test_round_trip_through_the_encoder(thinking, content):
    msgs = [
        {"role": "user", "content": "Q"},
        {"role": "assistant", "content": content, "reasoning_content": "I need tools.", "tool_calls": CALLS},
    ]
    text = assistant_text(msgs, thinking)
    assert text.endswith(EOS)
    parsed = parse_assistant_output(text, thinking=thinking, strict=True)
    assert parsed.content == content
    assert parsed.reasoning_content == ("I need tools." if thinking else None)
    assert [c.name for c in parsed.tool_calls] == ["get_weather", "mixed", "now"]
    for got, sent in zip(parsed.tool_calls, CALLS, strict=True):
        assert json.loads(got.arguments) == json.loads(sent["function"]["arguments"])
    # and back again: the parsed calls render to the same block
    again = render_tool_calls((c.name, json.loads(c.arguments)) for c in parsed.tool_calls)
    assert f"\n\n{again}{EOS}" in text


def test_reasoning_split_without_tools():
    assert parse_assistant_output(f"think hard</think>Paris.{EOS}", thinking=True) == parse_assistant_output(
        "think hard</think>Paris.", thinking=True
    )
    p = parse_assistant_output("think hard</think>Paris.", thinking=True)
    assert (p.reasoning_content, p.content, p.tool_calls) == ("think hard", "Paris.", ())
    p = parse_assistant_output("<think>r</think>c", thinking=True)
    assert (p.reasoning_content, p.content) == ("r", "c")
    # cut off by max_tokens before </think>: all reasoning
    p = parse_assistant_output("still thinking", thinking=True)
    assert (p.reasoning_content, p.content) == ("still thinking", "")
    p = parse_assistant_output("plain answer", thinking=False)
    assert (p.reasoning_content, p.content) == (None, "plain answer")


def test_parameter_forms():
    block = (
        f'<{D}tool_calls>\n<{D}invoke name="f">\n'
        f'<{D}parameter name="s" string="true">  spaced  </{D}parameter>\n'
        f'<{D}parameter name="j" string="false">{{"a": [1, 2]}}</{D}parameter>\n'
        f"</{D}invoke>\n</{D}tool_calls>"
    )
    (c,) = parse_tool_calls_block(block)
    assert c == ParsedToolCall("f", '{"s": "  spaced  ", "j": {"a": [1, 2]}}')


@pytest.mark.parametrize(
    ("block", "match"),
    [
        (f'<{D}tool_calls>\n<{D}invoke name="f">\n', "expected"),
        (f'<{D}tool_calls>\n<{D}invoke nam="f">\n</{D}invoke>\n</{D}tool_calls>', "malformed invoke"),
        (f'<{D}tool_calls>\n<{D}invoke name="">\n</{D}invoke>\n</{D}tool_calls>', "empty name"),
        (
            f'<{D}tool_calls>\n<{D}invoke name="f">\n<{D}parameter name="a" string="maybe">1</{D}parameter>\n'
            f"</{D}invoke>\n</{D}tool_calls>",
            "malformed parameter",
        ),
        (f'<{D}tool_calls>\n<{D}invoke name="f">\n<{D}parameter name="a" string="true">1', "not closed"),
        (
            f'<{D}tool_calls>\n<{D}invoke name="f">\n<{D}parameter name="a" string="false">nope</{D}parameter>\n'
            f"</{D}invoke>\n</{D}tool_calls>",
            "not JSON",
        ),
        (
            f'<{D}tool_calls>\n<{D}invoke name="f">\n<{D}parameter name="a" string="true">1</{D}parameter>\n'
            f'<{D}parameter name="a" string="true">2</{D}parameter>\n</{D}invoke>\n</{D}tool_calls>',
            "duplicate parameter",
        ),
        (f"<{D}tool_calls>\n</{D}tool_calls>\ntrailing words", "unexpected text after"),
    ],
)
def test_malformed_blocks(block, match):
    with pytest.raises(ToolCallParseError, match=match):
        parse_tool_calls_block(block)
    with pytest.raises(ToolCallParseError):
        parse_assistant_output("r</think>c\n\n" + block, thinking=True, strict=True)
    # lenient: the raw text comes back as content, no calls
    p = parse_assistant_output("r</think>c\n\n" + block, thinking=True)
    assert (p.content, p.tool_calls) == ("c\n\n" + block, ())


# ---------------------------------------------------------------- streaming
def feed_chunks(text, size, thinking):
    parser = StreamingAssistantParser(thinking=thinking)
    reasoning, content = [], []
    for i in range(0, len(text), size):
        d = parser.feed(text[i : i + size])
        reasoning.append(d.reasoning)
        content.append(d.content)
    last, parsed = parser.finish()
    reasoning.append(last.reasoning)
    content.append(last.content)
    return "".join(reasoning), "".join(content), parsed


@pytest.mark.parametrize("size", [1, 2, 3, 7, 1000])
@pytest.mark.parametrize("thinking", [True, False])
def test_streaming_matches_the_whole_parse(size, thinking):
    msgs = [
        {"role": "user", "content": "Q"},
        {
            "role": "assistant",
            "content": "Checking.\n",
            "reasoning_content": "Need </thin data.",
            "tool_calls": CALLS,
        },
    ]
    text = assistant_text(msgs, thinking)[: -len(EOS)]  # engines stop on EOS and do not stream it
    reasoning, content, parsed = feed_chunks(text, size, thinking)
    assert parsed == parse_assistant_output(text, thinking=thinking)
    assert len(parsed.tool_calls) == 3
    assert content == parsed.content == "Checking.\n"
    assert reasoning == (parsed.reasoning_content or "")


@pytest.mark.parametrize("size", [1, 4, 1000])
def test_streaming_without_tools_and_truncated_reasoning(size):
    reasoning, content, parsed = feed_chunks("a < b </think>answer with <｜DSML｜ mention\n\n", size, True)
    assert (reasoning, content) == ("a < b ", "answer with <｜DSML｜ mention\n\n")
    reasoning, content, parsed = feed_chunks("only reasoning </thi", size, True)
    assert (reasoning, content, parsed.reasoning_content) == (
        "only reasoning </thi",
        "",
        "only reasoning </thi",
    )


def test_streaming_malformed_block_falls_back_to_content():
    text = f"r</think>c\n\n<{D}tool_calls>\n<{D}invoke oops"
    _, content, parsed = feed_chunks(text, 3, True)
    assert parsed.tool_calls == () and content == parsed.content == f"c\n\n<{D}tool_calls>\n<{D}invoke oops"
