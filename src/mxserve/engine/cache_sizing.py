"""How many cache pages each pool gets, from a memory budget (the start-up line's numbers).

A token of context costs bytes in every pool: one window entry and one compressor-state row per
layer that has them, 1/ratio of a compressed entry and an indexer key. `plan_cache` turns a byte
budget into a token capacity, then into pages per pool, adding one partial page per running
sequence per pool (a sequence's last page is rarely full).
"""

from __future__ import annotations

from dataclasses import dataclass

from mxserve.config import ModelConfig
from mxserve.engine.pool_spec import PoolSpec, deepseek_v4_pool_specs
from mxserve.model.kv_state import page_bytes_per_pool
from mxserve.model.numerics import NumericPolicy


@dataclass(frozen=True)
class CachePlan:
    pool_specs: tuple[PoolSpec, ...]  # pages per pool handed to the block manager and the caches
    bytes_per_token: float  # cache bytes one token of context costs (all layers, all pools)
    capacity_tokens: int  # tokens of context that fit (all sequences together)
    total_bytes: int  # bytes the pools take

    @property
    def num_blocks(self) -> dict[str, int]:
        return {spec.name: spec.num_blocks for spec in self.pool_specs}

    def startup_line(self) -> str:
        pages = sum(spec.num_blocks for spec in self.pool_specs)
        return (
            f"KV cache: {self.total_bytes / 2**20:.1f} MiB in {pages} pages over {len(self.pool_specs)} pools; "
            f"{self.capacity_tokens} tokens fit; {self.bytes_per_token:.0f} B per token"
        )


def plan_cache(
    config: ModelConfig, policy: NumericPolicy, *, budget_bytes: int, block_size: int, max_num_seqs: int,
    max_model_len: int, extra_window_layers: int = 0,
) -> CachePlan:
    """Pages per pool for `budget_bytes`; capacity is capped at max_num_seqs × max_model_len (no use
    for more). ValueError when the budget cannot hold one max_model_len sequence.
    `extra_window_layers`: further caches addressed through the window pool's tables (the DSpark
    stage windows with speculative decoding), charged to the window pool's page bytes."""
    page_bytes = page_bytes_per_pool(config, policy, block_size, extra_window_layers=extra_window_layers)
    specs_unit = deepseek_v4_pool_specs(num_blocks=1, block_size=block_size,
                                        compress_rate_csa=config.compress_rate_csa,
                                        compress_rate_hca=config.compress_rate_hca)
    per_token = sum(page_bytes[s.name] / (block_size * s.positions_per_unit) for s in specs_unit)
    slack_bytes = max_num_seqs * sum(page_bytes.values())  # one partial page per sequence per pool
    capacity = int(max(0, budget_bytes - slack_bytes) // per_token)
    capacity = min(capacity, max_num_seqs * max_model_len)
    if capacity < max_model_len:
        raise ValueError(
            f"KV cache budget {budget_bytes / 2**20:.1f} MiB holds {capacity} tokens, fewer than max_model_len="
            f"{max_model_len} ({per_token:.0f} B per token); raise kv_cache_memory or lower max_model_len/max_num_seqs"
        )
    counts = {
        s.name: max(1, -(-(capacity // s.positions_per_unit) // block_size)) + max_num_seqs for s in specs_unit
    }
    specs = deepseek_v4_pool_specs(num_blocks=counts, block_size=block_size,
                                   compress_rate_csa=config.compress_rate_csa,
                                   compress_rate_hca=config.compress_rate_hca)
    total = sum(counts[name] * page_bytes[name] for name in counts)
    return CachePlan(specs, per_token, capacity, total)


def budget_for_tokens(config: ModelConfig, policy: NumericPolicy, *, tokens: int, block_size: int,
                      max_num_seqs: int, extra_window_layers: int = 0) -> int:
    """The smallest `kv_cache_memory` for which `plan_cache` fits `tokens` tokens (inverse of the plan)."""
    page_bytes = page_bytes_per_pool(config, policy, block_size, extra_window_layers=extra_window_layers)
    specs = deepseek_v4_pool_specs(num_blocks=1, block_size=block_size, compress_rate_csa=config.compress_rate_csa,
                                   compress_rate_hca=config.compress_rate_hca)
    per_token = sum(page_bytes[s.name] / (block_size * s.positions_per_unit) for s in specs)
    return int(max_num_seqs * sum(page_bytes.values()) + tokens * per_token) + 1
