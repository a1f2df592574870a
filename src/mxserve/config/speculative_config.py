"""SpeculativeConfig: the `--speculative-config` options (vLLM's spelling), frozen and validated.

    {"method": "dspark", "num_speculative_tokens": 7,
     "draft_sample_method": "greedy" | "probabilistic", "rejection_sample_method": "standard" | "block"}

`num_speculative_tokens` None means the checkpoint's `dspark_block_size` (the trained default K;
the field runs 7). Static K: every decode step drafts K tokens (fewer only where max_tokens, the
context length or the step's token budget leave no room). Pure Python.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from typing import Any

SPECULATIVE_METHODS = ("dspark",)
DRAFT_SAMPLE_METHODS = ("greedy", "probabilistic")
REJECTION_SAMPLE_METHODS = ("standard", "block")
MAX_SPECULATIVE_TOKENS = 32  # a sanity bound: a verify chunk is K + 1 target positions


@dataclass(frozen=True)
class SpeculativeConfig:
    method: str = "dspark"  # the draft: only the 0731 DSpark draft is implemented
    num_speculative_tokens: int | None = None  # K drafts per step; None = the checkpoint's dspark_block_size
    draft_sample_method: str = "greedy"  # draft tokens: argmax, or sampled at the request's temperature
    rejection_sample_method: str = "standard"  # token-by-token (Leviathan/Chen) or block verification (Sun et al.)

    def __post_init__(self) -> None:
        def bad(name: str, why: str) -> ValueError:
            return ValueError(f"speculative_config.{name}={getattr(self, name)!r}: {why}")

        if self.method not in SPECULATIVE_METHODS:
            raise bad("method", f"must be one of {SPECULATIVE_METHODS}")
        k = self.num_speculative_tokens
        if k is not None and (not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= MAX_SPECULATIVE_TOKENS):
            raise bad("num_speculative_tokens", f"must be an integer in [1, {MAX_SPECULATIVE_TOKENS}] (or null)")
        if self.draft_sample_method not in DRAFT_SAMPLE_METHODS:
            raise bad("draft_sample_method", f"must be one of {DRAFT_SAMPLE_METHODS}")
        if self.rejection_sample_method not in REJECTION_SAMPLE_METHODS:
            raise bad("rejection_sample_method", f"must be one of {REJECTION_SAMPLE_METHODS}")

    @classmethod
    def parse(cls, value: SpeculativeConfig | dict[str, Any] | str | None) -> SpeculativeConfig | None:
        """From a config, a dict, or a JSON object string (the CLI's `--speculative-config`).
        None, "" and "null" mean no speculation. ValueError naming unknown keys or bad JSON."""
        if value is None or isinstance(value, SpeculativeConfig):
            return value
        if isinstance(value, str):
            if value.strip() in ("", "null", "none", "None"):
                return None
            try:
                value = json.loads(value)
            except json.JSONDecodeError as exc:
                raise ValueError(f"speculative_config: not valid JSON ({exc.msg}): {value!r}") from None
            if value is None:
                return None
        if not isinstance(value, dict):
            raise ValueError(f"speculative_config must be a JSON object, got {type(value).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(value) - known)
        if unknown:
            raise ValueError(f"speculative_config: unknown key(s) {unknown}; known: {sorted(known)}")
        return cls(**value)

    def resolve_k(self, block_size: int) -> int:
        """K for a checkpoint whose `dspark_block_size` is `block_size`."""
        return self.num_speculative_tokens if self.num_speculative_tokens is not None else block_size
