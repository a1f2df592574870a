"""Reasoning-effort tiers per checkpoint generation, and the OpenAI `reasoning_effort` mapping.

Two checkpoint generations ship different effort tables (dsv4-0731.md §5):

=============  ==========================  ==============================
effort         preview (DeepSeek-V4-Flash)  0731 (DeepSeek-V4-Flash-0731)
=============  ==========================  ==============================
None           no prefix                   no prefix (= "low", the default)
"low"          no prefix (*)               no prefix
"high"         no prefix                   "Absolute maximum ..." paragraph
"max"          "Absolute maximum ..."       "Beyond maximum ..." paragraph
=============  ==========================  ==============================

(*) the preview's official encoder rejects "low"; mxserve accepts it as "no prefix" so that
one request vocabulary (low/high/max) works against both generations.

The prefix is written only in thinking mode, right after BOS. The tables are data
(`EFFORT_PREFIXES`); `effort_prefix` is the one lookup.
"""

from __future__ import annotations

from typing import Literal

from mxserve.engine.prompt.templates import EFFORT_ABSOLUTE_MAXIMUM, EFFORT_BEYOND_MAXIMUM

PromptGeneration = Literal["preview", "0731"]
ReasoningEffort = Literal["low", "high", "max"]

GENERATIONS: tuple[str, ...] = ("preview", "0731")

# generation -> effort (None = not given) -> the paragraph written after BOS in thinking mode
EFFORT_PREFIXES: dict[str, dict[str | None, str]] = {
    "preview": {None: "", "low": "", "high": "", "max": EFFORT_ABSOLUTE_MAXIMUM},
    "0731": {None: "", "low": "", "high": EFFORT_ABSOLUTE_MAXIMUM, "max": EFFORT_BEYOND_MAXIMUM},
}

# mxserve's server default when a request names no `reasoning_effort`: thinking on, "high" --
# the same as vLLM's DeepSeek-V4 tokenizer. On 0731 that writes the "Absolute maximum" paragraph;
# on the preview it writes nothing. (The encoder's own default, effort=None, writes nothing.)
DEFAULT_THINKING = True
DEFAULT_REASONING_EFFORT: ReasoningEffort = "high"

# OpenAI request value -> encoder effort, as vLLM maps it (thinking mode); "none" means chat mode.
OPENAI_EFFORT_MAP: dict[str, ReasoningEffort] = {
    "minimal": "low",
    "low": "low",
    "medium": "low",
    "high": "high",
    "xhigh": "high",
    "max": "max",
}


def normalize_generation(generation: object) -> str:
    """Accept "preview"/"0731" or `mxserve.config.CheckpointLayout` (a str enum); raise otherwise."""
    value = getattr(generation, "value", generation)
    if value not in GENERATIONS:
        raise ValueError(f"unknown prompt generation {generation!r}; expected one of {list(GENERATIONS)}")
    return str(value)


def effort_prefix(generation: object, reasoning_effort: str | None, *, thinking: bool) -> str:
    """The paragraph to write right after BOS (empty string for none).

    Raises ValueError for an effort the generation's table does not know. In chat mode the
    effort is validated but nothing is written.
    """
    table = EFFORT_PREFIXES[normalize_generation(generation)]
    if reasoning_effort not in table:
        known = [k for k in table if k is not None]
        raise ValueError(
            f"unknown reasoning_effort {reasoning_effort!r} for the {normalize_generation(generation)} "
            f"encoder; expected None or one of {known}"
        )
    return table[reasoning_effort] if thinking else ""


def map_openai_reasoning_effort(value: str | None) -> tuple[bool, ReasoningEffort | None]:
    """Map an OpenAI-style `reasoning_effort` request value to `(thinking, effort)`.

    * None (not given)             -> (True, "high")   mxserve's default (= vLLM's)
    * "none"                       -> (False, None)    chat mode
    * "minimal" / "low" / "medium" -> (True, "low")
    * "high" / "xhigh"             -> (True, "high")
    * "max"                        -> (True, "max")
    * anything else                -> (True, "high")   as vLLM does (lenient, never an error)

    Matching is case-insensitive and ignores surrounding whitespace.
    """
    if value is None:
        return DEFAULT_THINKING, DEFAULT_REASONING_EFFORT
    key = str(value).strip().lower()
    if key == "none":
        return False, None
    return True, OPENAI_EFFORT_MAP.get(key, "high")
