"""Rendering tool calls in DeepSeek's DSML markup (the parser is `mxserve.engine.tool_calls`).

A block of calls reads::

    <｜DSML｜tool_calls>
    <｜DSML｜invoke name="get_weather">
    <｜DSML｜parameter name="location" string="true">Beijing</｜DSML｜parameter>
    <｜DSML｜parameter name="days" string="false">3</｜DSML｜parameter>
    </｜DSML｜invoke>
    </｜DSML｜tool_calls>

String argument values are written as they are with `string="true"`; every other JSON value
(number, boolean, null, array, object) is written as JSON (`ensure_ascii=False`, Python's default
`", "` / `": "` separators) with `string="false"`. Invokes are joined by one newline; a call with
no arguments has an empty line between its invoke tags.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from mxserve.engine.prompt.templates import (
    INVOKE_CLOSE,
    INVOKE_OPEN_PREFIX,
    PARAMETER_CLOSE,
    PARAMETER_OPEN_PREFIX,
    TOOL_CALLS_CLOSE,
    TOOL_CALLS_OPEN,
)


def to_json(value: Any) -> str:
    """JSON as the reference writes it: non-ASCII kept, default separators, key order kept."""
    return json.dumps(value, ensure_ascii=False)


def render_parameter(name: str, value: Any) -> str:
    is_string = isinstance(value, str)
    text = value if is_string else to_json(value)
    return f'{PARAMETER_OPEN_PREFIX} name="{name}" string="{"true" if is_string else "false"}">{text}{PARAMETER_CLOSE}'


def render_invoke(name: str, arguments: Mapping[str, Any]) -> str:
    params = "\n".join(render_parameter(str(k), v) for k, v in arguments.items())
    return f'{INVOKE_OPEN_PREFIX} name="{name}">\n{params}\n{INVOKE_CLOSE}'


def render_tool_calls(calls: Iterable[tuple[str, Mapping[str, Any]]]) -> str:
    """`(name, arguments)` pairs -> one `<｜DSML｜tool_calls>` block (no leading separator)."""
    invokes = "\n".join(render_invoke(name, arguments) for name, arguments in calls)
    return f"{TOOL_CALLS_OPEN}\n{invokes}\n{TOOL_CALLS_CLOSE}"
