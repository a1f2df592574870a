"""The DSpark stages' context-KV windows (dsv4-0731 §3.2 step 3, §4).

One paged KV cache per draft stage, in the target's KV format (fp8_ds_mla in faithful mode).
Entries are addressed by token position through the TARGET's window-pool block tables, so a
sequence's draft windows live in pages it already owns: no second allocator, and preemption or
finishing frees them with the target's pages. Only the last `sliding_window` positions before a
draft block are ever read (the release's 128-entry window); older entries are dead bytes, as in
the target's window pool. Rows are written for COMMITTED positions only, so a rejected draft
token can never leave a trace here.
"""

from __future__ import annotations

import torch

from mxserve.config import ModelConfig
from mxserve.kernels.cache import PagedKVCache
from mxserve.model.numerics import NumericPolicy


class DraftWindows:
    """`num_stages` caches of `num_blocks` pages of `block_size` entries (one per position)."""

    def __init__(self, config: ModelConfig, policy: NumericPolicy, *, num_blocks: int, block_size: int,
                 device: torch.device | str = "cpu") -> None:
        if config.dspark is None:
            raise ValueError("DraftWindows: the model config has no DSpark draft (not a 0731 checkpoint)")
        self.caches = [
            PagedKVCache(num_blocks, block_size, mode=policy.kv_cache_dtype.value, head_dim=config.head_dim,
                         rope_dim=config.qk_rope_head_dim, device=device)
            for _ in range(config.dspark.num_stages)
        ]

    def __getitem__(self, stage: int) -> PagedKVCache:
        return self.caches[stage]
