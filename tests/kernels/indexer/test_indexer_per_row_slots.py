"""Indexer scores with one slot row per query ([T, N] key slots, the decode batch's form: each row
its own sequence's keys) == each row scored alone against its own [N] slots, bit for bit."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from mxserve.kernels.cache import PagedIndexerKeyCache
from mxserve.kernels.indexer.triton import indexer_scores_cache_triton

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.mark.parametrize("mode", ["fp8", "fp32"])
def test_per_row_slots_equal_each_row_alone(mode):
    cache = PagedIndexerKeyCache(6, 4, mode=mode, head_dim=128, device=DEVICE)
    g = torch.Generator().manual_seed(2)
    cache.write(torch.arange(24, device=DEVICE), torch.randn(24, 128, generator=g).to(DEVICE))
    slots = torch.tensor([[3, 4, 7, 8, 0, -1, -1], [12, 13, 14, 15, 16, 17, 18], [-1] * 7], device=DEVICE)
    q = torch.randn(3, 8, 128, generator=g).to(DEVICE)
    w = torch.randn(3, 8, generator=g).to(DEVICE)
    out = indexer_scores_cache_triton(q, w, cache, slots)
    assert out.shape == (3, 7)
    for row in range(3):
        alone = indexer_scores_cache_triton(q[row : row + 1], w[row : row + 1], cache, slots[row])
        assert torch.equal(out[row], alone[0]), f"row {row}"
    assert torch.equal(out[2], torch.zeros(7, device=DEVICE))  # −1 keys score exactly 0
    with pytest.raises(ValueError, match=r"key_slots must be int64 \[N\] or \[3, N\]"):
        indexer_scores_cache_triton(q, w, cache, slots[:2])
