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

The engine's pure-Python block manager will own the tables; until then `ensure_capacity` grows
them from a simple free list per pool.
"""

from __future__ import annotations

from enum import StrEnum

import torch

from mxserve.config import AttentionKind, ModelConfig
from mxserve.kernels.cache import CompressorStateCache, PagedIndexerKeyCache, PagedKVCache
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
    """Caches for `max_sequences` sequences of up to `max_positions` tokens each."""

    def __init__(
        self,
        config: ModelConfig,
        policy: NumericPolicy,
        *,
        max_sequences: int,
        max_positions: int,
        block_size: int = 64,
        device: torch.device | str = "cpu",
    ) -> None:
        if max_sequences <= 0 or max_positions <= 0:
            raise ValueError(f"{max_sequences=} and {max_positions=} must be positive")
        self.config = config
        self.block_size = block_size
        self.max_positions = max_positions
        csa, hca = config.compress_rate_csa, config.compress_rate_hca
        units = {
            Pool.WINDOW: max_positions, Pool.CSA: max_positions // csa + 1, Pool.HCA: max_positions // hca + 1,
            Pool.INDEXER: max_positions // csa + 1, Pool.CSA_STATE: max_positions, Pool.HCA_STATE: max_positions,
            Pool.INDEXER_STATE: max_positions,
        }
        self.num_blocks = {pool: max_sequences * -(-n // block_size) for pool, n in units.items()}
        self._free = {pool: list(range(n - 1, -1, -1)) for pool, n in self.num_blocks.items()}
        self.block_tables: dict[Pool, dict[int, list[int]]] = {pool: {} for pool in Pool}

        kv_mode = policy.kv_cache_dtype.value
        head_dim, rope_dim = config.head_dim, config.qk_rope_head_dim
        if policy.kv_cache_dtype is KVCacheDtype.FP8_DS_MLA and (head_dim, rope_dim) != (512, 64):
            raise ValueError(
                f"kv_cache_dtype=fp8_ds_mla needs head_dim 512 with 64 RoPE dims, the model has "
                f"head_dim={head_dim}, qk_rope_head_dim={rope_dim}; use kv_cache_dtype='bf16' or 'fp32'"
            )
        indexer_mode = "fp8" if policy.indexer_cache_fp8 and config.index_head_dim == 128 else "fp32"
        self.layers: list[LayerCaches] = []
        for layer_id in range(config.num_hidden_layers):
            kind = config.attention_kind(layer_id)
            caches = LayerCaches()

            def kv_cache(pool: Pool) -> PagedKVCache:
                return PagedKVCache(self.num_blocks[pool], block_size, mode=kv_mode, head_dim=head_dim,
                                    rope_dim=rope_dim, device=device)

            caches.window = kv_cache(Pool.WINDOW)
            if kind is AttentionKind.CSA:
                caches.compressed = kv_cache(Pool.CSA)
                caches.state = CompressorStateCache(
                    self.num_blocks[Pool.CSA_STATE], block_size, row_width=4 * head_dim, device=device
                )
                caches.indexer = PagedIndexerKeyCache(
                    self.num_blocks[Pool.INDEXER], block_size, mode=indexer_mode, head_dim=config.index_head_dim,
                    device=device,
                )
                caches.indexer_state = CompressorStateCache(
                    self.num_blocks[Pool.INDEXER_STATE], block_size, row_width=4 * config.index_head_dim, device=device
                )
            elif kind is AttentionKind.HCA:
                caches.compressed = kv_cache(Pool.HCA)
                caches.state = CompressorStateCache(
                    self.num_blocks[Pool.HCA_STATE], block_size, row_width=2 * head_dim, device=device
                )
            self.layers.append(caches)

    # ------------------------------------------------------------------ block tables
    def _units_needed(self, pool: Pool, end_pos: int) -> int:
        if pool in (Pool.CSA, Pool.INDEXER):
            return end_pos // self.config.compress_rate_csa
        if pool is Pool.HCA:
            return end_pos // self.config.compress_rate_hca
        return end_pos

    def ensure_capacity(self, seq_index: int, end_pos: int) -> None:
        """Grow the sequence's tables in every pool to cover positions [0, end_pos)."""
        if end_pos > self.max_positions:
            raise CacheCapacityError(f"sequence {seq_index}: position {end_pos - 1} exceeds max_positions={self.max_positions}")
        for pool in Pool:
            table = self.block_tables[pool].setdefault(seq_index, [])
            needed_blocks = -(-self._units_needed(pool, end_pos) // self.block_size)
            while len(table) < needed_blocks:
                if not self._free[pool]:
                    raise CacheCapacityError(f"pool {pool.value}: no free pages ({self.num_blocks[pool]} in total)")
                table.append(self._free[pool].pop())

    def free_sequence(self, seq_index: int) -> None:
        for pool in Pool:
            self._free[pool].extend(reversed(self.block_tables[pool].pop(seq_index, [])))

    def slots(self, pool: Pool, seq_index: int, indices: torch.Tensor) -> torch.Tensor:
        """Global slots of a sequence's indices (position or entry) in a pool; i < 0 → −1."""
        table = self.block_tables[pool].get(seq_index, [])
        table_t = torch.tensor([*table, -1], dtype=torch.int64, device=indices.device)
        block = torch.div(indices, self.block_size, rounding_mode="floor")
        valid = (indices >= 0) & (block < len(table))
        block_ids = table_t[torch.where(valid, block, torch.full_like(block, len(table)))]
        slot = block_ids * self.block_size + indices.remainder(self.block_size)
        return torch.where(valid, slot, torch.full_like(slot, -1))
