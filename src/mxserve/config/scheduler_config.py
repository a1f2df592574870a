"""SchedulerConfig: the scheduler's narrow, frozen sub-config (token budget, caps, limits).

The engine builds it once (CLI or public API) and hands it to the scheduler alone; nothing
derived (pages that fit, per-token bytes) is ever written back into it.
"""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(frozen=True)
class SchedulerConfig:
    """Limits of one scheduling step. Every field is a positive int; `__post_init__` raises
    ValueError naming the field and its value otherwise."""

    max_model_len: int  # tokens (prompt + output) one request may reach; longer prompts are refused
    max_num_batched_tokens: int = 2048  # token budget of one step, decodes and prefill chunks together
    long_prefill_token_threshold: int = 1024  # most tokens one request may take in a step (prefill cap)
    max_num_seqs: int = 256  # most requests running (holding cache pages) at once
    # Speculative decoding: draft tokens a decoding request verifies per step (K; 0 = off). Its
    # decode chunk then reserves 1 + K positions of budget and pages (docs/speculative.md).
    num_speculative_tokens: int = 0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            minimum = 0 if f.name == "num_speculative_tokens" else 1
            # bool is an int subclass; True as a token budget is a bug, not a budget of 1.
            if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
                kind = "a positive int" if minimum else "an int >= 0"
                raise ValueError(f"SchedulerConfig.{f.name} must be {kind}, got {value!r}")
