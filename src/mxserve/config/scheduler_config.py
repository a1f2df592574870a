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
    # The most rows (1 + drafts per decoding request) one step may verify; 0 = no limit. The
    # speculative runner's step graphs stop at their largest bucket (64 rows): above it a step runs
    # eager, ~40x slower than a replay, so drafts are cut evenly until the decodes fit, down to plain
    # decodes (0 drafts) for large batches, where speculation gains nothing anyway.
    max_verify_rows: int = 0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            minimum = 0 if f.name in ("num_speculative_tokens", "max_verify_rows") else 1
            # bool is an int subclass; True as a token budget is a bug, not a budget of 1.
            if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
                kind = "a positive int" if minimum else "an int >= 0"
                raise ValueError(f"SchedulerConfig.{f.name} must be {kind}, got {value!r}")
