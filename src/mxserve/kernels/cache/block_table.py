"""Slot mapping: (sequence, entry index) -> global cache slot, and a trivial block allocator.

A sequence's cache entries live in the pages its block table lists, in order: entry `i` of
sequence `r` is at `slot = block_table[r][i // B] * B + i % B` (spec §8.1; the sparse attention
indices are exactly these slots). "Entry index" is the token position for the window KV and
compressor-state caches and the compressed-entry number s for the compressed/indexer caches.
Anything without a page (negative index, index past the table, table hole -1) maps to -1.

`BlockTable` holds per-sequence tables as one padded int64 tensor (what kernels consume).
`SimpleBlockAllocator` is a free list for tests; the engine's block manager replaces it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from mxserve.kernels.cache.page_layout import INVALID_SLOT


def slots_from_block_table(
    block_table: torch.Tensor, seq_ids: torch.Tensor, entry_ids: torch.Tensor, block_size: int
) -> torch.Tensor:
    """Global slots for entries `entry_ids[i]` of sequences `seq_ids[i]`.

    block_table: int [num_seqs, max_blocks], block ids, -1 = no block. seq_ids, entry_ids: int,
    same shape S (broadcastable). Returns int64 S: `block_table[seq, idx // B] * B + idx % B`,
    -1 where idx < 0, seq < 0, idx // B >= max_blocks or the table entry is -1.
    """
    if block_size <= 0:
        raise ValueError(f"block_size must be > 0, got {block_size=}")
    if block_table.dim() != 2:
        raise ValueError(f"block_table must be [num_seqs, max_blocks], got {tuple(block_table.shape)}")
    table = block_table.to(torch.int64)
    seq_ids, entry_ids = torch.broadcast_tensors(
        torch.as_tensor(seq_ids, dtype=torch.int64, device=table.device),
        torch.as_tensor(entry_ids, dtype=torch.int64, device=table.device),
    )
    num_seqs, max_blocks = table.shape
    if bool((seq_ids >= num_seqs).any()):
        raise ValueError(f"seq id {int(seq_ids.max())} >= {num_seqs=}")
    if max_blocks == 0 or num_seqs == 0:
        return torch.full_like(entry_ids, INVALID_SLOT)
    block_idx = torch.div(entry_ids, block_size, rounding_mode="floor")
    ok = (entry_ids >= 0) & (seq_ids >= 0) & (block_idx < max_blocks)
    # Clamp so the gather is in bounds for invalid lanes; their result is masked below.
    block_id = table[seq_ids.clamp(min=0), block_idx.clamp(0, max_blocks - 1)]
    ok &= block_id >= 0
    slots = block_id * block_size + (entry_ids - block_idx * block_size)
    return torch.where(ok, slots, torch.full_like(slots, INVALID_SLOT))


@dataclass(frozen=True)
class BlockTable:
    """Per-sequence block tables as one padded tensor.

    table: int64 [num_seqs, max_blocks], -1 padded. block_size: entries per page.
    """

    table: torch.Tensor
    block_size: int

    @classmethod
    def from_lists(
        cls, tables: Sequence[Sequence[int]], block_size: int, device: torch.device | str | None = None
    ) -> BlockTable:
        max_blocks = max((len(t) for t in tables), default=0)
        padded = torch.full((len(tables), max_blocks), INVALID_SLOT, dtype=torch.int64)
        for row, blocks in enumerate(tables):
            padded[row, : len(blocks)] = torch.as_tensor(list(blocks), dtype=torch.int64)
        return cls(padded.to(device), block_size)

    def slots(self, seq_ids: torch.Tensor, entry_ids: torch.Tensor) -> torch.Tensor:
        """See `slots_from_block_table`."""
        return slots_from_block_table(self.table, seq_ids, entry_ids, self.block_size)

    def slots_for_range(self, seq_id: int, start: int, stop: int) -> torch.Tensor:
        """Slots of entries start..stop-1 of one sequence, int64 [stop - start]."""
        ids = torch.arange(start, stop, dtype=torch.int64, device=self.table.device)
        return self.slots(torch.full_like(ids, seq_id), ids)


def num_blocks_for(num_entries: int, block_size: int) -> int:
    """Pages needed to hold `num_entries` entries."""
    return -(-num_entries // block_size)


class SimpleBlockAllocator:
    """A LIFO free list of block ids 0..num_blocks-1 (tests only; pure Python)."""

    def __init__(self, num_blocks: int) -> None:
        if num_blocks < 0:
            raise ValueError(f"num_blocks must be >= 0, got {num_blocks=}")
        self.num_blocks = num_blocks
        self._free = list(range(num_blocks - 1, -1, -1))  # pop() hands out 0, 1, 2, ... first
        self._used: set[int] = set()

    @property
    def num_free(self) -> int:
        return len(self._free)

    def allocate(self, n: int) -> list[int]:
        """n block ids; raises RuntimeError if fewer than n are free (nothing is allocated then)."""
        if n > len(self._free):
            raise RuntimeError(f"out of cache blocks: asked {n}, {len(self._free)} free of {self.num_blocks}")
        ids = [self._free.pop() for _ in range(n)]
        self._used.update(ids)
        return ids

    def free(self, ids: Sequence[int]) -> None:
        """Return blocks; raises ValueError for a block that is not allocated (double free)."""
        for block in ids:
            if block not in self._used:
                raise ValueError(f"block {block} is not allocated (double free?)")
            self._used.remove(block)
            self._free.append(block)
