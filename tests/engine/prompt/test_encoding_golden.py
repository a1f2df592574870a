"""Golden prompt-encoding tests: exact strings written by hand from the rules of DeepSeek's
`encoding/encoding_dsv4.py` (spec §10, dsv4-0731.md §5), and cross-checked against the
reference's published fixtures (`encoding/tests/test_output_1.txt`, 2281 characters) and the
expectations third-party ports transcribed from the reference (see docs/prompt-encoding.md).

The special tokens and fixed paragraphs are spelled out here as literals, independent of
`mxserve.engine.prompt.templates`, so a typo in the implementation cannot write itself into an
expectation.
"""

from __future__ import annotations

import pytest

from mxserve.engine.prompt import encode_messages

BOS = "<\uff5cbegin\u2581of\u2581sentence\uff5c>"
EOS = "<\uff5cend\u2581of\u2581sentence\uff5c>"
U = "<\uff5cUser\uff5c>"
A = "<\uff5cAssistant\uff5c>"
R = "<\uff5clatest_reminder\uff5c>"
D = "\uff5cDSML\uff5c"

ABSOLUTE_MAXIMUM = (
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to resolve the root cause, rigorously stress-testing your logic against all potential paths, edge cases, and adversarial scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate step, considered alternative, and rejected hypothesis to ensure absolutely no assumption is left unchecked.\n\n"
)
BEYOND_MAXIMUM = (
    "Reasoning Effort: Beyond maximum — exhaustive, relentless, and uncompromising.\n"
    "You MUST reason with the utmost depth and rigor, leaving absolutely nothing to chance: exhaustively decompose the problem into its most fundamental components, trace every causal chain to its root, and resolve the underlying cause rather than any surface symptom.\n"
    "Do not stop reasoning until you have independently verified the solution from multiple angles and are certain that no assumption remains unchecked and no error remains undiscovered.\n\n"
)


def tools_section(schemas: str) -> str:
    return (
        "## Tools\n\n"
        "You have access to a set of tools to help answer the user's question. You can invoke tools by writing a "
        f'"<{D}tool_calls>" block like the following:\n\n'
        f"<{D}tool_calls>\n"
        f'<{D}invoke name="$TOOL_NAME">\n'
        f'<{D}parameter name="$PARAMETER_NAME" string="true|false">$PARAMETER_VALUE</{D}parameter>\n'
        "...\n"
        f"</{D}invoke>\n"
        f'<{D}invoke name="$TOOL_NAME2">\n'
        "...\n"
        f"</{D}invoke>\n"
        f"</{D}tool_calls>\n\n"
        'String parameters should be specified as is and set `string="true"`. For all other types (numbers, '
        'booleans, arrays, objects), pass the value in JSON format and set `string="false"`.\n\n'
        "If thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning inside "
        "<think>...</think> BEFORE any tool calls or final response.\n\n"
        "Otherwise, output directly after </think> with tool calls or final response.\n\n"
        "### Available Tool Schemas\n\n"
        f"{schemas}\n\n"
        "You MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.\n"
    )


def enc(messages, *, thinking, effort=None, generation="0731", **kw):
    return encode_messages(messages, thinking=thinking, reasoning_effort=effort, generation=generation, **kw)


# ---------------------------------------------------------------- chat / thinking / system
@pytest.mark.parametrize("generation", ["preview", "0731"])
def test_chat_single_turn(generation):
    msgs = [{"role": "user", "content": "Hi"}]
    assert enc(msgs, thinking=False, generation=generation) == f"{BOS}{U}Hi{A}</think>"


@pytest.mark.parametrize("generation", ["preview", "0731"])
def test_thinking_single_turn_no_effort(generation):
    msgs = [{"role": "user", "content": "Hi"}]
    assert enc(msgs, thinking=True, generation=generation) == f"{BOS}{U}Hi{A}<think>"


def test_system_prompt_chat_and_thinking():
    msgs = [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": "Hi"}]
    assert enc(msgs, thinking=False) == f"{BOS}You are a helpful assistant.{U}Hi{A}</think>"
    assert enc(msgs, thinking=True) == f"{BOS}You are a helpful assistant.{U}Hi{A}<think>"


# ---------------------------------------------------------------- multi-turn
MULTI = [
    {"role": "system", "content": "S"},
    {"role": "user", "content": "Hello"},
    {"role": "assistant", "content": "Hi there!", "reasoning_content": "The user said hello."},
    {"role": "user", "content": "What is the capital of France?"},
]


def test_multi_turn_thinking_drops_history_reasoning():
    expected = f"{BOS}S{U}Hello{A}</think>Hi there!{EOS}{U}What is the capital of France?{A}<think>"
    assert enc(MULTI, thinking=True) == expected


def test_multi_turn_thinking_keeps_reasoning_after_last_user():
    msgs = [
        *MULTI,
        {
            "role": "assistant",
            "content": "The capital of France is Paris.",
            "reasoning_content": "The user asks about the capital of France. It is Paris.",
        },
    ]
    expected = (
        f"{BOS}S{U}Hello{A}</think>Hi there!{EOS}{U}What is the capital of France?{A}<think>"
        f"The user asks about the capital of France. It is Paris.</think>The capital of France is Paris.{EOS}"
    )
    assert enc(msgs, thinking=True) == expected


def test_multi_turn_chat_never_renders_reasoning():
    expected = f"{BOS}S{U}Hello{A}</think>Hi there!{EOS}{U}What is the capital of France?{A}</think>"
    assert enc(MULTI, thinking=False) == expected


def test_multi_turn_drop_thinking_off_keeps_history_reasoning():
    expected = (
        f"{BOS}S{U}Hello{A}<think>The user said hello.</think>Hi there!{EOS}"
        f"{U}What is the capital of France?{A}<think>"
    )
    assert enc(MULTI, thinking=True, drop_thinking=False) == expected


def test_reasoning_key_alias():
    msgs = [dict(m) for m in MULTI]
    msgs[2] = {"role": "assistant", "content": "Hi there!", "reasoning": "The user said hello."}
    assert enc(msgs, thinking=True, drop_thinking=False) == enc(MULTI, thinking=True, drop_thinking=False)


def test_consecutive_user_messages_join_with_blank_line():
    msgs = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
    assert enc(msgs, thinking=False) == f"{BOS}{U}a\n\nb{A}</think>"


def test_text_content_parts_are_joined():
    msgs = [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]
    assert enc(msgs, thinking=False) == f"{BOS}{U}a\nb{A}</think>"


# ---------------------------------------------------------------- tools (reference fixture 1)
WEATHER = {
    "name": "get_weather",
    "description": "Get the weather for a specific location",
    "parameters": {
        "type": "object",
        "properties": {
            "location": {"type": "string", "description": "The city name"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "Temperature unit"},
        },
        "required": ["location"],
    },
}
SEARCH = {
    "name": "search",
    "description": "Search the web for information",
    "parameters": {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "Search query"},
            "num_results": {"type": "integer", "description": "Number of results to return"},
        },
        "required": ["query"],
    },
}
WEATHER_JSON = (
    '{"name": "get_weather", "description": "Get the weather for a specific location", "parameters": '
    '{"type": "object", "properties": {"location": {"type": "string", "description": "The city name"}, '
    '"unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "Temperature unit"}}, '
    '"required": ["location"]}}'
)
SEARCH_JSON = (
    '{"name": "search", "description": "Search the web for information", "parameters": {"type": "object", '
    '"properties": {"query": {"type": "string", "description": "Search query"}, "num_results": '
    '{"type": "integer", "description": "Number of results to return"}}, "required": ["query"]}}'
)
FIXTURE_1_MESSAGES = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What's the weather in Beijing?"},
    {
        "role": "assistant",
        "content": "",
        "reasoning_content": "The user wants to know the weather in Beijing. I should use the get_weather tool.",
        "tool_calls": [
            {
                "id": "call_001",
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "arguments": '{"location": "Beijing", "unit": "celsius"}',
                },
            }
        ],
    },
    {
        "role": "tool",
        "tool_call_id": "call_001",
        "content": '{"temperature": 22, "condition": "sunny", "humidity": 45}',
    },
    {
        "role": "assistant",
        "content": "The weather in Beijing is currently sunny with a temperature of 22°C and 45% humidity.",
        "reasoning_content": "Got the weather data. Let me format a nice response.",
    },
]
FIXTURE_1_OUTPUT = (
    f"{BOS}You are a helpful assistant.\n\n{tools_section(WEATHER_JSON + chr(10) + SEARCH_JSON)}"
    f"{U}What's the weather in Beijing?{A}<think>The user wants to know the weather in Beijing. "
    "I should use the get_weather tool.</think>\n\n"
    f"<{D}tool_calls>\n"
    f'<{D}invoke name="get_weather">\n'
    f'<{D}parameter name="location" string="true">Beijing</{D}parameter>\n'
    f'<{D}parameter name="unit" string="true">celsius</{D}parameter>\n'
    f"</{D}invoke>\n"
    f"</{D}tool_calls>{EOS}"
    f'{U}<tool_result>{{"temperature": 22, "condition": "sunny", "humidity": 45}}</tool_result>'
    f"{A}<think>Got the weather data. Let me format a nice response.</think>"
    f"The weather in Beijing is currently sunny with a temperature of 22°C and 45% humidity.{EOS}"
)


def test_reference_fixture_1_tools_tool_call_and_result():
    tools = [{"type": "function", "function": WEATHER}, {"type": "function", "function": SEARCH}]
    got = enc(FIXTURE_1_MESSAGES, thinking=True, tools=tools)
    assert len(FIXTURE_1_OUTPUT) == 2281  # the published file's length
    assert got == FIXTURE_1_OUTPUT


def test_tools_on_the_system_message_equal_request_tools():
    msgs = [dict(m) for m in FIXTURE_1_MESSAGES]
    msgs[0] = {**msgs[0], "tools": [{"type": "function", "function": WEATHER}, SEARCH]}  # bare schema too
    assert enc(msgs, thinking=True) == FIXTURE_1_OUTPUT


def test_request_tools_without_system_insert_a_bare_system_turn():
    tools = [{"type": "function", "function": WEATHER}]
    got = enc([{"role": "user", "content": "Weather?"}], thinking=True, effort="high", tools=tools)
    assert got == f"{BOS}{ABSOLUTE_MAXIMUM}\n\n{tools_section(WEATHER_JSON)}{U}Weather?{A}<think>"


def test_tools_switch_drop_thinking_off():
    echo = {"name": "echo", "parameters": {"type": "object", "properties": {}}}
    msgs = [
        {"role": "system", "content": "S", "tools": [echo]},
        {"role": "user", "content": "One"},
        {"role": "assistant", "content": "First answer.", "reasoning_content": "First reasoning."},
        {"role": "user", "content": "Two"},
    ]
    schema = '{"name": "echo", "parameters": {"type": "object", "properties": {}}}'
    expected = (
        f"{BOS}S\n\n{tools_section(schema)}{U}One{A}<think>First reasoning.</think>First answer.{EOS}"
        f"{U}Two{A}<think>"
    )
    assert enc(msgs, thinking=True) == expected


def call(call_id, name, arguments):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def test_tool_results_follow_call_order_not_return_order():
    msgs = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "Q"},
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": "R",
            "tool_calls": [call("call_A", "alpha", '{"n": "1"}'), call("call_B", "beta", '{"n": "2"}')],
        },
        {"role": "tool", "tool_call_id": "call_B", "content": "B result"},
        {"role": "tool", "tool_call_id": "call_A", "content": "A result"},
    ]
    # the merged tool-result turn is the last user turn, so the calling turn's reasoning is history
    expected = (
        f"{BOS}S{U}Q{A}</think>\n\n<{D}tool_calls>\n"
        f'<{D}invoke name="alpha">\n<{D}parameter name="n" string="true">1</{D}parameter>\n</{D}invoke>\n'
        f'<{D}invoke name="beta">\n<{D}parameter name="n" string="true">2</{D}parameter>\n</{D}invoke>\n'
        f"</{D}tool_calls>{EOS}{U}<tool_result>A result</tool_result>\n\n<tool_result>B result</tool_result>"
        f"{A}<think>"
    )
    assert enc(msgs, thinking=True) == expected


def test_user_text_after_tool_result_joins_the_same_turn():
    msgs = [
        {"role": "user", "content": "Q"},
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": "R",
            "tool_calls": [call("c1", "alpha", '{"n": "1"}')],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "result"},
        {"role": "user", "content": "And now this."},
    ]
    expected = (
        f"{BOS}{U}Q{A}</think>\n\n<{D}tool_calls>\n"
        f'<{D}invoke name="alpha">\n<{D}parameter name="n" string="true">1</{D}parameter>\n</{D}invoke>\n'
        f"</{D}tool_calls>{EOS}{U}<tool_result>result</tool_result>\n\nAnd now this.{A}<think>"
    )
    assert enc(msgs, thinking=True) == expected


def test_non_string_arguments_render_as_json_string_false():
    args = (
        '{"name": "a/b", "count": 7, "flag": false, "list": [1, "two"], "nested": {"k": -1}, "nothing": null}'
    )
    msgs = [
        {"role": "user", "content": "Q"},
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": "R",
            "tool_calls": [call("c1", "mixed", args)],
        },
    ]
    expected = (
        f'{BOS}{U}Q{A}<think>R</think>\n\n<{D}tool_calls>\n<{D}invoke name="mixed">\n'
        f'<{D}parameter name="name" string="true">a/b</{D}parameter>\n'
        f'<{D}parameter name="count" string="false">7</{D}parameter>\n'
        f'<{D}parameter name="flag" string="false">false</{D}parameter>\n'
        f'<{D}parameter name="list" string="false">[1, "two"]</{D}parameter>\n'
        f'<{D}parameter name="nested" string="false">{{"k": -1}}</{D}parameter>\n'
        f'<{D}parameter name="nothing" string="false">null</{D}parameter>\n'
        f"</{D}invoke>\n</{D}tool_calls>{EOS}"
    )
    assert enc(msgs, thinking=True) == expected


def test_call_without_arguments_and_content_before_calls_chat():
    msgs = [
        {"role": "user", "content": "Q"},
        {"role": "assistant", "content": "Let me check.", "tool_calls": [call("c1", "now", "{}")]},
        {"role": "tool", "tool_call_id": "c1", "content": "12:00"},
    ]
    expected = (
        f'{BOS}{U}Q{A}</think>Let me check.\n\n<{D}tool_calls>\n<{D}invoke name="now">\n\n</{D}invoke>\n'
        f"</{D}tool_calls>{EOS}{U}<tool_result>12:00</tool_result>{A}</think>"
    )
    assert enc(msgs, thinking=False) == expected


def test_response_format_follows_system_text():
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "Q"}]
    rf = {"type": "json_object", "path": "a/b"}
    expected = (
        f"{BOS}S\n\n## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n"
        f'{{"type": "json_object", "path": "a/b"}}{U}Q{A}</think>'
    )
    assert enc(msgs, thinking=False, response_format=rf) == expected


# ---------------------------------------------------------------- developer / latest_reminder / tasks
def test_developer_with_tools_and_latest_reminder():
    # the shape of the reference's fixture 3 (interleaved thinking + search), with one small tool
    find = {"name": "find", "parameters": {"type": "object"}}
    msgs = [
        {"role": "system", "content": "该助手为DeepSeek。"},
        {"role": "latest_reminder", "content": "2026-02-21,星期六"},
        {"role": "developer", "content": "能一起吃吗？", "tools": [find]},
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": "想一想。",
            "tool_calls": [call(None, "find", '{"pattern": "布洛芬"}')],
        },
        {"role": "tool", "content": "[0]"},
        {"role": "assistant", "content": "请及时就医。", "reasoning_content": "现在开始组织回答。"},
    ]
    schema = '{"name": "find", "parameters": {"type": "object"}}'
    expected = (
        f"{BOS}该助手为DeepSeek。{R}2026-02-21,星期六{U}能一起吃吗？\n\n{tools_section(schema)}"
        f'{A}<think>想一想。</think>\n\n<{D}tool_calls>\n<{D}invoke name="find">\n'
        f'<{D}parameter name="pattern" string="true">布洛芬</{D}parameter>\n</{D}invoke>\n</{D}tool_calls>{EOS}'
        f"{U}<tool_result>[0]</tool_result>{A}<think>现在开始组织回答。</think>请及时就医。{EOS}"
    )
    assert enc(msgs, thinking=True) == expected


def test_developer_is_a_user_turn_and_is_dropped_from_history():
    msgs = [
        {"role": "system", "content": "S"},
        {"role": "developer", "content": "Be brief."},
        {"role": "assistant", "content": "OK.", "reasoning_content": "fine"},
        {"role": "user", "content": "Hi"},
    ]
    assert enc(msgs, thinking=False) == f"{BOS}S{U}Be brief.{A}</think>OK.{EOS}{U}Hi{A}</think>"
    # thinking + drop_thinking: the history developer turn goes, and so does the reasoning
    assert enc(msgs, thinking=True) == f"{BOS}SOK.{EOS}{U}Hi{A}<think>"


def test_last_developer_turn_opens_the_answer():
    msgs = [{"role": "system", "content": "S"}, {"role": "developer", "content": "Do X."}]
    assert enc(msgs, thinking=True) == f"{BOS}S{U}Do X.{A}<think>"


def test_task_tokens():
    action = [{"role": "user", "content": "Q", "task": "action"}]
    assert enc(action, thinking=False) == f"{BOS}{U}Q{A}</think><\uff5caction\uff5c>"
    assert enc(action, thinking=True) == f"{BOS}{U}Q{A}<think><\uff5caction\uff5c>"
    query = [{"role": "user", "content": "Q", "task": "query"}]
    assert enc(query, thinking=False) == f"{BOS}{U}Q<\uff5cquery\uff5c>"
    # the answer to a task turn carries no reasoning part, even in thinking mode
    answered = [*query, {"role": "assistant", "content": "x", "reasoning_content": "r"}]
    assert enc(answered, thinking=True) == f"{BOS}{U}Q<\uff5cquery\uff5c>x{EOS}"


# ---------------------------------------------------------------- effort tiers, both generations
HELLO = [{"role": "user", "content": "Hello"}]
EFFORT_TABLE = {
    # (generation, effort): the paragraph after BOS in thinking mode
    ("preview", None): "",
    ("preview", "low"): "",
    ("preview", "high"): "",
    ("preview", "max"): ABSOLUTE_MAXIMUM,
    ("0731", None): "",
    ("0731", "low"): "",
    ("0731", "high"): ABSOLUTE_MAXIMUM,
    ("0731", "max"): BEYOND_MAXIMUM,
}


@pytest.mark.parametrize(("generation", "effort"), list(EFFORT_TABLE))
def test_effort_tier_thinking(generation, effort):
    expected = f"{BOS}{EFFORT_TABLE[generation, effort]}{U}Hello{A}<think>"
    assert enc(HELLO, thinking=True, effort=effort, generation=generation) == expected


@pytest.mark.parametrize(("generation", "effort"), list(EFFORT_TABLE))
def test_effort_tier_chat_writes_no_paragraph(generation, effort):
    assert enc(HELLO, thinking=False, effort=effort, generation=generation) == f"{BOS}{U}Hello{A}</think>"


def test_effort_paragraph_precedes_system_text():
    msgs = [{"role": "system", "content": "S"}, *HELLO]
    assert enc(msgs, thinking=True, effort="max") == f"{BOS}{BEYOND_MAXIMUM}S{U}Hello{A}<think>"
    assert (
        enc(msgs, thinking=True, effort="max", generation="preview")
        == f"{BOS}{ABSOLUTE_MAXIMUM}S{U}Hello{A}<think>"
    )


def test_generation_accepts_checkpoint_layout():
    from mxserve.config import CheckpointLayout

    assert enc(HELLO, thinking=True, effort="high", generation=CheckpointLayout.V0731).startswith(
        BOS + ABSOLUTE_MAXIMUM
    )
    assert (
        enc(HELLO, thinking=True, effort="high", generation=CheckpointLayout.PREVIEW)
        == f"{BOS}{U}Hello{A}<think>"
    )


# ---------------------------------------------------------------- reference fixture 3
FIXTURE_3_SCHEMAS = (
    '{"name": "search", "description": "Web search. Split multiple queries with \'||\'.", "parameters": '
    '{"type": "object", "properties": {"queries": {"type": "string", "description": "query1||query2"}}, '
    '"required": ["queries"], "additionalProperties": false, "$schema": "http://json-schema.org/draft-07/schema#"}}\n'
    '{"name": "open", "description": "Batch open IDs (format 【{id}†...】) or URLs.", "parameters": {"type": '
    '"object", "properties": {"open_list": {"type": "array", "items": {"type": "object", "properties": {"id": '
    '{"description": "ID or URL", "anyOf": [{"type": "integer"}, {"type": "string"}], "default": -1}, "cursor": '
    '{"type": "integer", "description": "", "default": -1}, "loc": {"type": "integer", "description": '
    '"Start line", "default": -1}, "num_lines": {"type": "integer", "description": "", "default": -1}, '
    '"view_source": {"type": "boolean", "description": "", "default": false}}, "additionalProperties": false}, '
    '"description": ""}}, "required": ["open_list"], "additionalProperties": false, "$schema": '
    '"http://json-schema.org/draft-07/schema#"}}\n'
    '{"name": "find", "description": "Find exact text pattern in pages.", "parameters": {"type": "object", '
    '"properties": {"find_list": {"type": "array", "items": {"type": "object", "properties": {"pattern": '
    '{"type": "string", "description": ""}, "cursor": {"type": "integer", "description": "", "default": -1}}, '
    '"required": ["pattern"], "additionalProperties": false}, "description": ""}}, "required": ["find_list"], '
    '"additionalProperties": false, "$schema": "http://json-schema.org/draft-07/schema#"}}'
)
FIXTURE_3_OUTPUT = (
    f"{BOS}该助手为DeepSeek，由深度求索公司创造。{R}2026-02-21,星期六,广州,App,中文"
    f"{U}小柴胡冲剂和布洛芬能一起吃吗？\n\nCITATION FORMAT: 【{{cursor_id}}†L{{start_line_id}}(-L{{end_line_id}})?】"
    f"\n\n{tools_section(FIXTURE_3_SCHEMAS)}"
    f"{A}<think>用户想知道小柴胡冲剂和布洛芬能否一起服用。</think>\n\n<{D}tool_calls>\n"
    f'<{D}invoke name="search">\n'
    f'<{D}parameter name="queries" string="true">小柴胡冲剂 布洛芬 相互作用 一起吃</{D}parameter>\n'
    f"</{D}invoke>\n</{D}tool_calls>{EOS}"
    f"{U}<tool_result>[0]</tool_result>{A}<think>现在开始组织回答。</think>请及时就医。{EOS}"
)


def test_reference_fixture_3_developer_latest_reminder_search():
    def obj(**props):
        return {"type": "object", "properties": props}

    int_default = {"type": "integer", "description": "", "default": -1}
    schema_tail = {"additionalProperties": False, "$schema": "http://json-schema.org/draft-07/schema#"}
    search = {
        "name": "search",
        "description": "Web search. Split multiple queries with '||'.",
        "parameters": {
            **obj(queries={"type": "string", "description": "query1||query2"}),
            "required": ["queries"],
            **schema_tail,
        },
    }
    open_item = {
        **obj(
            id={
                "description": "ID or URL",
                "anyOf": [{"type": "integer"}, {"type": "string"}],
                "default": -1,
            },
            cursor=int_default,
            loc={"type": "integer", "description": "Start line", "default": -1},
            num_lines=int_default,
            view_source={"type": "boolean", "description": "", "default": False},
        ),
        "additionalProperties": False,
    }
    open_ = {
        "name": "open",
        "description": "Batch open IDs (format 【{id}†...】) or URLs.",
        "parameters": {
            **obj(open_list={"type": "array", "items": open_item, "description": ""}),
            "required": ["open_list"],
            **schema_tail,
        },
    }
    find_item = {
        **obj(pattern={"type": "string", "description": ""}, cursor=int_default),
        "required": ["pattern"],
        "additionalProperties": False,
    }
    find = {
        "name": "find",
        "description": "Find exact text pattern in pages.",
        "parameters": {
            **obj(find_list={"type": "array", "items": find_item, "description": ""}),
            "required": ["find_list"],
            **schema_tail,
        },
    }
    msgs = [
        {"role": "system", "content": "该助手为DeepSeek，由深度求索公司创造。"},
        {"role": "latest_reminder", "content": "2026-02-21,星期六,广州,App,中文"},
        {
            "role": "developer",
            "content": "小柴胡冲剂和布洛芬能一起吃吗？\n\nCITATION FORMAT: 【{cursor_id}†L{start_line_id}(-L{end_line_id})?】",
            "tools": [{"type": "function", "function": t} for t in (search, open_, find)],
        },
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": "用户想知道小柴胡冲剂和布洛芬能否一起服用。",
            "tool_calls": [
                {
                    "type": "function",
                    "function": {
                        "name": "search",
                        "arguments": '{"queries": "小柴胡冲剂 布洛芬 相互作用 一起吃"}',
                    },
                }
            ],
        },
        {"role": "tool", "content": "[0]"},
        {"role": "assistant", "content": "请及时就医。", "reasoning_content": "现在开始组织回答。"},
    ]
    assert len(FIXTURE_3_OUTPUT) == 3021  # the published file's length
    assert enc(msgs, thinking=True) == FIXTURE_3_OUTPUT
