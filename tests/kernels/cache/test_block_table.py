"""Slot mapping (block_table[idx // B] * B + idx % B, -1 when there is no page) and the test allocator."""

from __future__ import annotations

import pytest
import torch

from mxserve.kernels.cache import BlockTable, SimpleBlockAllocator, num_blocks_for, slots_from_block_table


def test_slots_follow_the_formula_and_invalidate_what_has_no_page():
    table = BlockTable.from_lists([[5, 2], [7], []], block_size=4)
    assert table.table.tolist() == [[5, 2], [7, -1], [-1, -1]]
    seq = torch.tensor([0, 0, 0, 0, 0, 1, 1, 2, 0, -1])
    idx = torch.tensor([0, 3, 4, 7, 8, 2, 4, 0, -1, 0])
    got = table.slots(seq, idx)
    assert got.tolist() == [20, 23, 8, 11, -1, 30, -1, -1, -1, -1]
    assert got.dtype == torch.int64


def test_brute_force_over_random_tables():
    g = torch.Generator().manual_seed(0)
    block_size = 3
    tables = [
        torch.randperm(20, generator=g)[: int(n)].tolist() for n in torch.randint(0, 5, (6,), generator=g)
    ]
    bt = BlockTable.from_lists(tables, block_size)
    seq = torch.randint(0, 6, (200,), generator=g)
    idx = torch.randint(-2, 16, (200,), generator=g)
    got = slots_from_block_table(bt.table, seq, idx, block_size).tolist()
    for s, i, slot in zip(seq.tolist(), idx.tolist(), got, strict=True):
        blocks = tables[s]
        want = (
            blocks[i // block_size] * block_size + i % block_size if 0 <= i < len(blocks) * block_size else -1
        )
        assert slot == want


def test_range_and_empty():
    bt = BlockTable.from_lists([[1, 0]], block_size=2)
    assert bt.slots_for_range(0, 1, 5).tolist() == [3, 0, 1, -1]
    empty = BlockTable.from_lists([], block_size=2)
    assert empty.slots(torch.tensor([], dtype=torch.int64), torch.tensor([], dtype=torch.int64)).numel() == 0
    with pytest.raises(ValueError, match="seq id"):
        bt.slots(torch.tensor([1]), torch.tensor([0]))


def test_allocator():
    alloc = SimpleBlockAllocator(4)
    a = alloc.allocate(3)
    assert a == [0, 1, 2] and alloc.num_free == 1
    with pytest.raises(RuntimeError, match="out of cache blocks"):
        alloc.allocate(2)
    alloc.free([1])
    assert alloc.allocate(2) == [1, 3]
    with pytest.raises(ValueError, match="not allocated"):
        alloc.free([1, 1])
    assert num_blocks_for(0, 4) == 0 and num_blocks_for(9, 4) == 3
