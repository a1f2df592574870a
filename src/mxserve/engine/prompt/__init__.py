"""DeepSeek-V4 prompt encoding (pure Python, no torch): messages -> prompt string, the effort
tiers of both checkpoint generations, and the OpenAI `reasoning_effort` mapping.
See docs/prompt-encoding.md."""

from mxserve.engine.prompt.dsml import render_tool_calls
from mxserve.engine.prompt.effort import (
    DEFAULT_REASONING_EFFORT,
    DEFAULT_THINKING,
    EFFORT_PREFIXES,
    PromptGeneration,
    ReasoningEffort,
    effort_prefix,
    map_openai_reasoning_effort,
    normalize_generation,
)
from mxserve.engine.prompt.encoding import encode_messages

__all__ = [
    "DEFAULT_REASONING_EFFORT",
    "DEFAULT_THINKING",
    "EFFORT_PREFIXES",
    "PromptGeneration",
    "ReasoningEffort",
    "effort_prefix",
    "encode_messages",
    "map_openai_reasoning_effort",
    "normalize_generation",
    "render_tool_calls",
]
