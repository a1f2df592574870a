"""The fixed strings of the DeepSeek-V4 prompt contract: special tokens, DSML markup, the tools
block, the response-format block and the reasoning-effort paragraphs.

These are data, not code: the model was trained on exactly these bytes, so they are reproduced
character for character from DeepSeek's `encoding/encoding_dsv4.py` (and its 0731 revision).
Everything that *decides* which string goes where lives in `encoding.py` and `effort.py`.

Note the two look-alike characters in every special token: `｜` is U+FF5C (FULLWIDTH VERTICAL
LINE) and `▁` is U+2581 (LOWER ONE EIGHTH BLOCK), never ASCII `|` and `_`.
"""

from __future__ import annotations

# ---------------------------------------------------------------- special tokens (strings)
BOS = "<｜begin▁of▁sentence｜>"
EOS = "<｜end▁of▁sentence｜>"
USER = "<｜User｜>"
ASSISTANT = "<｜Assistant｜>"
LATEST_REMINDER = "<｜latest_reminder｜>"
THINK_START = "<think>"
THINK_END = "</think>"
DSML = "｜DSML｜"

# Quick-instruction task tokens (internal classification tasks; spec §10 "task" field).
TASK_TOKENS: dict[str, str] = {
    "action": "<｜action｜>",
    "query": "<｜query｜>",
    "authority": "<｜authority｜>",
    "domain": "<｜domain｜>",
    "title": "<｜title｜>",
    "read_url": "<｜read_url｜>",
}

# ---------------------------------------------------------------- DSML tool-call markup
TOOL_CALLS_BLOCK = "tool_calls"
TOOL_CALLS_OPEN = f"<{DSML}{TOOL_CALLS_BLOCK}>"  # <｜DSML｜tool_calls>
TOOL_CALLS_CLOSE = f"</{DSML}{TOOL_CALLS_BLOCK}>"  # </｜DSML｜tool_calls>
INVOKE_OPEN_PREFIX = f"<{DSML}invoke"  # followed by ` name="...">`
INVOKE_CLOSE = f"</{DSML}invoke>"
PARAMETER_OPEN_PREFIX = f"<{DSML}parameter"  # followed by ` name="..." string="true|false">`
PARAMETER_CLOSE = f"</{DSML}parameter>"
# An assistant turn separates its text content from its tool-call block by one blank line.
TOOL_CALLS_SEPARATOR = "\n\n"

TOOL_RESULT_OPEN = "<tool_result>"
TOOL_RESULT_CLOSE = "</tool_result>"
# Blocks of one user turn (tool results, then any text) are joined by a blank line.
USER_BLOCK_SEPARATOR = "\n\n"

# ---------------------------------------------------------------- system-prompt sections
TOOLS_TEMPLATE = f"""## Tools

You have access to a set of tools to help answer the user's question. You can invoke tools by writing a "<{DSML}tool_calls>" block like the following:

<{DSML}tool_calls>
<{DSML}invoke name="$TOOL_NAME">
<{DSML}parameter name="$PARAMETER_NAME" string="true|false">$PARAMETER_VALUE</{DSML}parameter>
...
</{DSML}invoke>
<{DSML}invoke name="$TOOL_NAME2">
...
</{DSML}invoke>
</{DSML}tool_calls>

String parameters should be specified as is and set `string="true"`. For all other types (numbers, booleans, arrays, objects), pass the value in JSON format and set `string="false"`.

If thinking_mode is enabled (triggered by {THINK_START}), you MUST output your complete reasoning inside {THINK_START}...{THINK_END} BEFORE any tool calls or final response.

Otherwise, output directly after {THINK_END} with tool calls or final response.

### Available Tool Schemas

{{tool_schemas}}

You MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.
"""

RESPONSE_FORMAT_TEMPLATE = (
    "## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n{schema}"
)
# Tools and response format are appended to a system/developer message after a blank line.
SECTION_SEPARATOR = "\n\n"

# ---------------------------------------------------------------- reasoning-effort paragraphs
# The preview encoder calls this one "max"; 0731 calls the same text "high".
EFFORT_ABSOLUTE_MAXIMUM = (
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to "
    "resolve the root cause, rigorously stress-testing your logic against all potential paths, "
    "edge cases, and adversarial scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate step, "
    "considered alternative, and rejected hypothesis to ensure absolutely no assumption is left "
    "unchecked.\n\n"
)
# New in 0731 ("max"). The dash is U+2014 EM DASH.
EFFORT_BEYOND_MAXIMUM = (
    "Reasoning Effort: Beyond maximum \u2014 exhaustive, relentless, and uncompromising.\n"
    "You MUST reason with the utmost depth and rigor, leaving absolutely nothing to chance: "
    "exhaustively decompose the problem into its most fundamental components, trace every causal "
    "chain to its root, and resolve the underlying cause rather than any surface symptom.\n"
    "Do not stop reasoning until you have independently verified the solution from multiple "
    "angles and are certain that no assumption remains unchecked and no error remains "
    "undiscovered.\n\n"
)
