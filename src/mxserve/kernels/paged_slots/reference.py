"""Torch twin of the decode step's per-row slot map (the address rule of spec §8.1).

`paged_slots_ref(tables, indices, block_size)`: tables [B, M] page ids (−1 = no page), indices
[B, ...] (row b's positions or entry ids) → int64 slots of indices' shape:
page · block_size + index mod block_size, and −1 where the index is negative, past the table or
on an absent page. For a real row this is exactly `ModelCacheState.slots` of its sequence.
"""

from __future__ import annotations

import torch


def paged_slots_ref(tables: torch.Tensor, indices: torch.Tensor, block_size: int) -> torch.Tensor:
    num_rows, width = tables.shape
    flat = indices.reshape(num_rows, -1)
    block = torch.div(flat, block_size, rounding_mode="floor")
    in_table = (flat >= 0) & (block < width)
    page = tables.gather(1, block.clamp(0, width - 1))
    slot = page * block_size + flat.remainder(block_size)
    return torch.where(in_table & (page >= 0), slot, torch.full_like(slot, -1)).view(indices.shape)
