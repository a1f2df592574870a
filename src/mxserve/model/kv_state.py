"""All incremental state of one model: per-layer paged caches plus per-sequence block tables.

Pools (one block table per sequence per pool, shared by every layer that has that pool, as in
vLLM's hybrid allocator):

| pool           | indexed by            | layers      | cache object                      |
|----------------|-----------------------|-------------|-----------------------------------|
| window         | token position        | all         | PagedKVCache (fp8_ds_mla/bf16/fp32) |
| csa / hca      | compressed entry s    | CSA / HCA   | PagedKVCache                      |
| indexer        | CSA entry s           | CSA         | PagedIndexerKeyCache (fp8/fp32)   |
| *_state        | token position        | CSA / HCA   | CompressorStateCache (fp32 rows)  |

Slot of index i of a sequence: `table[i // B] * B + i % B` (spec §8.1); negative indices → −1.
The window pool keeps every position for now (pages behind the window could be freed later);
state rows are per position, which is what makes speculative rollback possible later.

The engine's pure-Python block manager owns the tables in serving (`set_block_tables`);
standalone users (tests, tools) let `ensure_capacity` grow them from a free list per pool.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from enum import StrEnum

import torch

from mxserve.config import AttentionKind, ModelConfig
from mxserve.kernels.cache import (
    CompressorStateCache,
    PagedIndexerKeyCache,
    PagedKVCache,
    default_kv_block_stride_bytes,
)
from mxserve.model.numerics import KVCacheDtype, NumericPolicy


class Pool(StrEnum):
    WINDOW = "window"
    CSA = "csa"
    HCA = "hca"
    INDEXER = "indexer"
    CSA_STATE = "csa_state"
    HCA_STATE = "hca_state"
    INDEXER_STATE = "indexer_state"


class CacheCapacityError(RuntimeError):
    """A pool ran out of pages; the message names the pool and the numbers."""


class LayerCaches:
    """The caches of one layer (None where the layer type has no such state)."""

    def __init__(self) -> None:
        self.window: PagedKVCache | None = None
        self.compressed: PagedKVCache | None = None
        self.indexer: PagedIndexerKeyCache | None = None
        self.state: CompressorStateCache | None = None
        self.indexer_state: CompressorStateCache | None = None


class ModelCacheState:
    """Caches for a fixed number of pages per pool, and the block tables of the live sequences.

    Sequences are identified by any hashable key (the engine uses request ids). Two ways to own
    the tables: `manage_tables=True` (standalone use: `ensure_capacity` grows tables from free
    lists) or `False` (the engine's block manager hands tables in with `set_block_tables`, and
    `ensure_capacity` only checks that they cover the chunk).
    """

    def __init__(
        self,
        config: ModelConfig,
        policy: NumericPolicy,
        *,
        num_blocks: Mapping[str, int] | int,
        block_size: int = 64,
        manage_tables: bool = True,
        device: torch.device | str = "cpu",
    ) -> None:
        if block_size <= 0:
            raise ValueError(f"{block_size=} must be positive")
        self.config = config
        self.block_size = block_size
        self.manage_tables = manage_tables
        counts = {p: num_blocks if isinstance(num_blocks, int) else num_blocks[p.value] for p in Pool}
        if any(n <= 0 for n in counts.values()):
            raise ValueError(f"every pool needs pages, got {counts}")
        self.num_blocks = counts
        self._free = {pool: list(range(n - 1, -1, -1)) for pool, n in counts.items()}
        self.block_tables: dict[Pool, dict[Hashable, list[int]]] = {pool: {} for pool in Pool}

        kv_mode = policy.kv_cache_dtype.value
        head_dim, rope_dim = config.head_dim, config.qk_rope_head_dim
        if policy.kv_cache_dtype is KVCacheDtype.FP8_DS_MLA and (head_dim, rope_dim) != (512, 64):
            raise ValueError(
                f"kv_cache_dtype=fp8_ds_mla needs head_dim 512 with 64 RoPE dims, the model has "
                f"head_dim={head_dim}, qk_rope_head_dim={rope_dim}; use kv_cache_dtype='bf16' or 'fp32'"
            )
        indexer_mode = indexer_cache_mode(config, policy)
        self.layers: list[LayerCaches] = []
        for layer_id in range(config.num_hidden_layers):
            kind = config.attention_kind(layer_id)
            caches = LayerCaches()

            def kv_cache(pool: Pool) -> PagedKVCache:
                return PagedKVCache(counts[pool], block_size, mode=kv_mode, head_dim=head_dim, rope_dim=rope_dim,
                                    device=device)

            caches.window = kv_cache(Pool.WINDOW)
            if kind is AttentionKind.CSA:
                caches.compressed = kv_cache(Pool.CSA)
                caches.state = CompressorStateCache(counts[Pool.CSA_STATE], block_size, row_width=4 * head_dim,
                                                    device=device)
                caches.indexer = PagedIndexerKeyCache(counts[Pool.INDEXER], block_size, mode=indexer_mode,
                                                      head_dim=config.index_head_dim, device=device)
                caches.indexer_state = CompressorStateCache(
                    counts[Pool.INDEXER_STATE], block_size, row_width=4 * config.index_head_dim, device=device
                )
            elif kind is AttentionKind.HCA:
                caches.compressed = kv_cache(Pool.HCA)
                caches.state = CompressorStateCache(counts[Pool.HCA_STATE], block_size, row_width=2 * head_dim,
                                                    device=device)
            self.layers.append(caches)

    @classmethod
    def for_sequences(
        cls, config: ModelConfig, policy: NumericPolicy, *, max_sequences: int, max_positions: int,
        block_size: int = 64, device: torch.device | str = "cpu",
    ) -> ModelCacheState:
        """Enough pages for `max_sequences` sequences of `max_positions` tokens (self-managed tables)."""
        if max_sequences <= 0 or max_positions <= 0:
            raise ValueError(f"{max_sequences=} and {max_positions=} must be positive")
        counts = {
            pool.value: max_sequences * max(1, -(-units_for(config, pool, max_positions) // block_size))
            for pool in Pool
        }
        return cls(config, policy, num_blocks=counts, block_size=block_size, device=device)

    # ------------------------------------------------------------------ block tables
    def set_block_tables(self, key: Hashable, tables: Mapping[str, Sequence[int]]) -> None:
        """Install a sequence's tables (pool name → page ids), as the engine's block manager owns them."""
        for pool in Pool:
            self.block_tables[pool][key] = list(tables.get(pool.value, ()))

    def ensure_capacity(self, key: Hashable, end_pos: int) -> None:
        """Make (or, with engine-owned tables, check) the tables cover positions [0, end_pos)."""
        for pool in Pool:
            table = self.block_tables[pool].setdefault(key, [])
            needed_blocks = -(-units_for(self.config, pool, end_pos) // self.block_size)
            if len(table) >= needed_blocks:
                continue
            if not self.manage_tables:
                raise CacheCapacityError(
                    f"sequence {key!r}: pool {pool.value} table has {len(table)} pages, position {end_pos - 1} "
                    f"needs {needed_blocks}"
                )
            while len(table) < needed_blocks:
                if not self._free[pool]:
                    raise CacheCapacityError(f"pool {pool.value}: no free pages ({self.num_blocks[pool]} in total)")
                table.append(self._free[pool].pop())

    def free_sequence(self, key: Hashable) -> None:
        for pool in Pool:
            pages = self.block_tables[pool].pop(key, [])
            if self.manage_tables:
                self._free[pool].extend(reversed(pages))

    def slots(self, pool: Pool, key: Hashable, indices: torch.Tensor) -> torch.Tensor:
        """Global slots of a sequence's indices (position or entry) in a pool; i < 0 → −1."""
        table = self.block_tables[pool].get(key, [])
        table_t = torch.tensor([*table, -1], dtype=torch.int64, device=indices.device)
        block = torch.div(indices, self.block_size, rounding_mode="floor")
        valid = (indices >= 0) & (block < len(table))
        block_ids = table_t[torch.where(valid, block, torch.full_like(block, len(table)))]
        slot = block_ids * self.block_size + indices.remainder(self.block_size)
        return torch.where(valid, slot, torch.full_like(slot, -1))


def positions_per_unit(config: ModelConfig, pool: Pool) -> int:
    """Positions one cache unit of `pool` stands for (1, or a compressor's rate)."""
    if pool in (Pool.CSA, Pool.INDEXER):
        return config.compress_rate_csa
    if pool is Pool.HCA:
        return config.compress_rate_hca
    return 1


def units_for(config: ModelConfig, pool: Pool, num_positions: int) -> int:
    """Cache units a sequence of `num_positions` tokens occupies in `pool`."""
    return num_positions // positions_per_unit(config, pool)


def indexer_cache_mode(config: ModelConfig, policy: NumericPolicy) -> str:
    return "fp8" if policy.indexer_cache_fp8 and config.index_head_dim == 128 else "fp32"


def page_bytes_per_pool(config: ModelConfig, policy: NumericPolicy, block_size: int, *,
                        extra_window_layers: int = 0) -> dict[str, int]:
    """Bytes one page of each pool costs, summed over every layer that has the pool (no allocation).
    `extra_window_layers`: further KV caches that share the window pool's tables (DSpark stage windows)."""
    kv_stride = default_kv_block_stride_bytes(policy.kv_cache_dtype.value, block_size, config.head_dim)
    indexer_entry = 132 if indexer_cache_mode(config, policy) == "fp8" else 4 * config.index_head_dim
    kinds = config.layer_kinds
    n_csa, n_hca = kinds.count(AttentionKind.CSA), kinds.count(AttentionKind.HCA)
    return {
        Pool.WINDOW.value: (len(kinds) + extra_window_layers) * kv_stride,
        Pool.CSA.value: n_csa * kv_stride,
        Pool.HCA.value: n_hca * kv_stride,
        Pool.INDEXER.value: n_csa * block_size * indexer_entry,
        Pool.CSA_STATE.value: n_csa * block_size * 4 * config.head_dim * 4,
        Pool.HCA_STATE.value: n_hca * block_size * 2 * config.head_dim * 4,
        Pool.INDEXER_STATE.value: n_csa * block_size * 4 * config.index_head_dim * 4,
    }
