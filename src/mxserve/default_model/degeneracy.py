"""Is a greedy continuation degenerate? The default model's acceptance check (issue 5).

A continuation is degenerate when it
* emits a special token (BOS/EOS/role/think markers: any id below `num_special`),
* uses too few distinct tokens (fewer than `min_distinct_fraction` of its length), or
* ends in a short loop: the trailing `min_loop_tokens` tokens repeat with a period of at most
  `max_period` tokens (e.g. "the the the ..." or "and he said, and he said, ...").
Pure Python (no torch), so tests and tools share it.
"""

from __future__ import annotations

from collections.abc import Sequence


def degeneracy_reason(
    tokens: Sequence[int], *, num_special: int, min_distinct_fraction: float = 0.3,
    max_period: int = 6, min_loop_tokens: int = 18,
) -> str | None:
    """Why `tokens` (generated ids only) is degenerate, or None when it is not."""
    tokens = list(tokens)
    special = [t for t in tokens if t < num_special]
    if special:
        return f"special token(s) {special[:4]} generated"
    if len(set(tokens)) < min_distinct_fraction * len(tokens):
        return f"only {len(set(tokens))} distinct tokens in {len(tokens)}"
    tail = tokens[-min_loop_tokens:]
    if len(tail) == min_loop_tokens:
        for period in range(1, max_period + 1):
            if all(tail[i] == tail[i - period] for i in range(period, len(tail))):
                return f"ends in a loop of period {period}"
    return None
