"""PoolSpec: one paged cache pool described as data, and DeepSeek-V4's pools (pure Python).

A pool is a set of equal pages. Each page holds `block_size` units, and a sequence of n tokens
needs floor(n / positions_per_unit) units: one per position for the sliding-window KV and the
compressor state rows, one per `compress_rate` positions for the compressed KV and indexer keys
(an entry exists only once its whole window of positions has been seen). The pool names match
`mxserve.model.kv_state.Pool` values so the model runner can map a table to its cache.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class PoolSpec:
    name: str  # pool name, e.g. "window" (matches mxserve.model.kv_state.Pool values)
    num_blocks: int  # pages in the pool
    block_size: int  # units (cache entries) per page
    positions_per_unit: int  # token positions per unit: 1, or the compression rate

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("PoolSpec.name must be a non-empty string")
        for field_name in ("num_blocks", "block_size", "positions_per_unit"):
            value = getattr(self, field_name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"PoolSpec({self.name!r}).{field_name} must be a positive int, got {value!r}")

    def units_needed(self, num_positions: int) -> int:
        """Cache entries a sequence of `num_positions` tokens has: floor(n / positions_per_unit)."""
        return num_positions // self.positions_per_unit

    def pages_needed(self, num_positions: int) -> int:
        """Pages that hold those entries: ceil(units_needed(n) / block_size); 0 for n = 0."""
        return -(-self.units_needed(num_positions) // self.block_size)

    def max_positions(self, num_pages: int) -> int:
        """The largest n with pages_needed(n) <= num_pages: n // positions_per_unit units fit
        num_pages * block_size, so n < (num_pages * block_size + 1) * positions_per_unit."""
        return (num_pages * self.block_size + 1) * self.positions_per_unit - 1


DEEPSEEK_V4_POOL_NAMES = ("window", "csa", "hca", "indexer", "csa_state", "hca_state", "indexer_state")


def deepseek_v4_pool_specs(
    *, num_blocks: int | Mapping[str, int], block_size: int, compress_rate_csa: int, compress_rate_hca: int
) -> tuple[PoolSpec, ...]:
    """The seven DeepSeek-V4 pools (see mxserve.model.kv_state): per-position window KV and
    compressor-state rows, CSA compressed KV and indexer keys at 1/compress_rate_csa, HCA
    compressed KV at 1/compress_rate_hca. `num_blocks` is one count for every pool or a count per
    pool name (every name required; the caller sizes pools from a memory budget)."""
    per_position = 1
    rates = {
        "window": per_position, "csa": compress_rate_csa, "hca": compress_rate_hca, "indexer": compress_rate_csa,
        "csa_state": per_position, "hca_state": per_position, "indexer_state": per_position,
    }
    if isinstance(num_blocks, Mapping):
        missing = [name for name in DEEPSEEK_V4_POOL_NAMES if name not in num_blocks]
        unknown = sorted(set(num_blocks) - set(DEEPSEEK_V4_POOL_NAMES))
        if missing or unknown:
            raise ValueError(f"num_blocks per pool: missing {missing}, unknown {unknown}")
        counts = dict(num_blocks)
    else:
        counts = dict.fromkeys(DEEPSEEK_V4_POOL_NAMES, num_blocks)
    return tuple(PoolSpec(name, counts[name], block_size, rates[name]) for name in DEEPSEEK_V4_POOL_NAMES)
