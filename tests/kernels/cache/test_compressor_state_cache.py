"""CompressorStateCache: fp32 rows per position, exact round trip, absent rows = (value 0, logit -inf)."""

from __future__ import annotations

import pytest
import torch

from mxserve.kernels.cache import BlockTable, CompressorStateCache


def test_round_trip_is_exact_and_absent_rows_are_masked():
    width = 2 * 6  # [a (6) | z (6)]
    cache = CompressorStateCache(3, 4, width)
    rows = torch.randn(5, width)
    slots = torch.tensor([0, 4, 11, 3, -1])
    cache.write(slots, rows)
    got = cache.read(torch.tensor([[11, -1], [0, 4]]))
    assert got.shape == (2, 2, width)
    assert torch.equal(got[0, 0], rows[2])
    assert torch.equal(got[1, 0], rows[0]) and torch.equal(got[1, 1], rows[1])
    assert torch.equal(got[0, 1, :6], torch.zeros(6))
    assert bool(torch.isneginf(got[0, 1, 6:]).all())
    # Slot 1 was never written: it is present (zeros), not absent.
    assert torch.equal(cache.read(torch.tensor([1])), torch.zeros(1, width))


def test_absent_rows_get_zero_pooling_weight():
    # The pooling softmax over an emit window where the first rows are before position 0.
    d = 4
    cache = CompressorStateCache(2, 4, 2 * d)
    table = BlockTable.from_lists([[1, 0]], block_size=4)
    a = torch.randn(3, d)
    z = torch.randn(3, d)
    cache.write(table.slots_for_range(0, 0, 3), torch.cat([a, z], -1))
    positions = torch.arange(-5, 3)  # 8-row window ending at position 2
    slots = table.slots(torch.zeros_like(positions), positions)
    rows = cache.read(slots)
    weights = torch.softmax(rows[:, d:], dim=0)
    pooled = (weights * rows[:, :d]).sum(0)
    assert torch.equal(weights[:5], torch.zeros(5, d))
    torch.testing.assert_close(pooled, (torch.softmax(z, 0) * a).sum(0), rtol=0, atol=1e-6)


def test_errors():
    with pytest.raises(ValueError, match="even"):
        CompressorStateCache(2, 4, 7)
    cache = CompressorStateCache(2, 4, 8)
    with pytest.raises(ValueError, match="fp32"):
        cache.write(torch.tensor([0]), torch.zeros(1, 8, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="more than once"):
        cache.write(torch.tensor([3, 3]), torch.zeros(2, 8))
    assert cache.buffer.view(torch.float32).numel() == 2 * 4 * 8
