"""Caches that look like B sequences of C tokens each, without computing C tokens of prefill.

A decode step at position C reads: the window pool's last `sliding_window` positions, every
compressed entry (HCA) or indexer key (CSA, then its top-k entries), and — when it emits an
entry — the compressor state rows of the last 2·ratio positions. So those pages are real and
filled with valid random entries through each cache's own writer; the pages of older
positions in the position-indexed pools (window, compressor states), which the step never
touches, all point at one shared junk page (page 0). A 64K-token context for 64 sequences then
costs the compressed pools' real size (~0.6 GB per CSA layer) instead of ~40 GB of state rows.
Block tables are handed in as the engine's block manager would (`manage_tables=False`).
"""

from __future__ import annotations

import torch

from mxserve.config import ModelConfig
from mxserve.kernels.cache import CompressorStateCache
from mxserve.model.kv_state import ModelCacheState, Pool, units_for
from mxserve.model.numerics import NumericPolicy

_POSITION_POOLS = (Pool.WINDOW, Pool.CSA_STATE, Pool.HCA_STATE, Pool.INDEXER_STATE)
_FILL_CHUNK = 1 << 16  # slots per write call (bounds the transient fp32 values)


def live_positions(config: ModelConfig) -> int:
    """How far back a decode step reaches in the position-indexed pools."""
    return max(config.sliding_window, 2 * config.compress_rate_hca, 2 * config.compress_rate_csa)


def build_cache_state(config: ModelConfig, policy: NumericPolicy, *, num_seqs: int, context_len: int,
                      new_tokens: int, block_size: int, device: torch.device, seed: int = 0) -> ModelCacheState:
    """Caches for `num_seqs` sequences that hold `context_len` tokens and will take `new_tokens` more."""
    if num_seqs <= 0 or context_len < 0 or new_tokens <= 0:
        raise ValueError(f"need num_seqs > 0, context_len >= 0, new_tokens > 0; got {num_seqs=}, {context_len=}, "
                         f"{new_tokens=}")
    end = context_len + new_tokens
    first_live = max(0, context_len - live_positions(config))
    tables: dict[Pool, list[list[int]]] = {}
    counts: dict[str, int] = {}
    for pool in Pool:
        num_pages = -(-units_for(config, pool, end) // block_size)
        first_live_page = first_live // block_size if pool in _POSITION_POOLS else 0
        next_page = 1  # page 0 is the shared junk page
        per_seq = []
        for _ in range(num_seqs):
            live = list(range(next_page, next_page + num_pages - first_live_page))
            next_page += len(live)
            per_seq.append([0] * first_live_page + live)
        tables[pool] = per_seq
        counts[pool.value] = next_page
    state = ModelCacheState(config, policy, num_blocks=counts, block_size=block_size, manage_tables=False,
                            device=device)
    for seq in range(num_seqs):
        state.set_block_tables(seq, {pool.value: tables[pool][seq] for pool in Pool})
    if context_len:
        _fill(state, config, num_seqs, context_len, first_live, device, seed)
    return state


def _fill(state: ModelCacheState, config: ModelConfig, num_seqs: int, context_len: int, first_live: int,
          device: torch.device, seed: int) -> None:
    """Valid random entries in every live slot that holds one of the first `context_len` positions."""
    g = torch.Generator(device=device).manual_seed(seed)
    for caches in state.layers:
        targets = [(caches.window, Pool.WINDOW, first_live, context_len)]
        if caches.compressed is not None:
            pool = Pool.CSA if caches.indexer is not None else Pool.HCA
            targets.append((caches.compressed, pool, 0, units_for(config, pool, context_len)))
            state_pool = Pool.CSA_STATE if pool is Pool.CSA else Pool.HCA_STATE
            targets.append((caches.state, state_pool, first_live, context_len))
        if caches.indexer is not None:
            targets.append((caches.indexer, Pool.INDEXER, 0, units_for(config, Pool.INDEXER, context_len)))
            targets.append((caches.indexer_state, Pool.INDEXER_STATE, first_live, context_len))
        for cache, pool, start, stop in targets:
            if stop <= start:
                continue
            indices = torch.arange(start, stop, device=device)
            slots = torch.cat([state.slots(pool, seq, indices) for seq in range(num_seqs)])
            width = cache.row_width if isinstance(cache, CompressorStateCache) else cache.head_dim
            for lo in range(0, slots.numel(), _FILL_CHUNK):
                part = slots[lo:lo + _FILL_CHUNK]
                cache.write(part, torch.randn(part.numel(), width, generator=g, device=device))
