"""The fixed-shape (sync-free, CUDA-graph capturable) writer and readers of `PagedCache` give the
same bytes and values as the row-selecting ones, for every cache type: slots with -1 mixed in,
all -1, none, a 2-D slot tensor, and a later overwrite."""

from __future__ import annotations

import pytest
import torch

from mxserve.kernels.cache import CompressorStateCache, PagedIndexerKeyCache, PagedKVCache


def _caches():
    yield lambda: PagedKVCache(3, 16, mode="fp8_ds_mla", head_dim=512, rope_dim=64)
    yield lambda: PagedKVCache(3, 16, mode="bf16", head_dim=64, rope_dim=16)
    yield lambda: PagedIndexerKeyCache(3, 16, mode="fp8", head_dim=128)
    yield lambda: CompressorStateCache(3, 16, row_width=32)


@pytest.mark.parametrize("make", list(_caches()), ids=["ds_mla", "bf16", "indexer_fp8", "state"])
def test_fixed_shape_forms_equal_selecting_forms(make):
    g = torch.Generator().manual_seed(0)
    a, b = make(), make()
    b.sync_free = True
    width = a.head_dim
    writes = [
        torch.tensor([5, -1, 17, 40, -1, 0]),
        torch.tensor([-1, -1, -1]),
        torch.tensor([], dtype=torch.int64),
        torch.tensor([[3, -1], [47, 20]]),
        torch.tensor([17, 6]),  # overwrites slot 17
    ]
    for slots in writes:
        rows = torch.randn(*slots.shape, width, generator=g)
        a.write(slots, rows)
        b.write(slots, rows)
        assert torch.equal(a.buffer, b.buffer)
    reads = torch.tensor([[17, -1, 0, 47], [-1, -1, 5, 3]])
    assert torch.equal(a.read(reads), b.read(reads))
    for x, y in zip(a.read_bytes(reads), b.read_bytes(reads), strict=True):
        assert torch.equal(x, y)
    assert torch.equal(a.read(torch.full((4,), -1)), b.read(torch.full((4,), -1)))
