"""The Triton slot map (`paged_slots_triton`, one launch) equals its torch twin exactly, under the
interpreter: random tables with absent pages (−1), padding rows (all −1), indices that are
negative, past the table, at page boundaries, int32 and int64, any trailing shape."""

from __future__ import annotations

import os

import pytest
import torch

from mxserve.kernels.paged_slots import paged_slots, paged_slots_ref, use_triton
from mxserve.kernels.paged_slots.triton import paged_slots_triton

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="needs the Triton interpreter")


def _tables(rows: int, width: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    t = torch.randint(0, 50, (rows, width), generator=g)
    t[torch.rand(rows, width, generator=g) < 0.2] = -1
    t[-1] = -1  # a padding row
    return t


@pytest.mark.parametrize("shape", [(5,), (5, 7), (5, 3, 4), (5, 0)])
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_equals_the_twin(shape, dtype):
    block_size, width = 8, 6
    tables = _tables(shape[0], width, seed=len(shape))
    g = torch.Generator().manual_seed(3)
    indices = torch.randint(-10, block_size * (width + 2), shape, generator=g).to(dtype)
    if indices.numel():
        indices.view(-1)[:4] = torch.tensor([0, block_size - 1, block_size, block_size * width], dtype=dtype)[
            : min(4, indices.numel())]
    got = paged_slots_triton(tables, indices, block_size)
    want = paged_slots_ref(tables, indices, block_size)
    assert got.dtype == torch.int64 and got.shape == indices.shape
    assert torch.equal(got, want), f"first mismatch at {torch.nonzero(got != want)[0].tolist()}"
    assert (got[-1] == -1).all()  # the padding row addresses nothing


def test_dispatch_and_switches(monkeypatch):
    tables, idx = _tables(2, 3, seed=1), torch.arange(2).view(2, 1)
    monkeypatch.delenv("MXSERVE_TRITON_PAGED_SLOTS", raising=False)
    assert not use_triton(idx)  # CPU tensors keep the twin unless a test asks
    monkeypatch.setenv("MXSERVE_TRITON_PAGED_SLOTS", "1")
    assert use_triton(idx)
    assert torch.equal(paged_slots(tables, idx, 4), paged_slots_ref(tables, idx, 4))
    monkeypatch.setenv("MXSERVE_TORCH_PAGED_SLOTS", "1")
    assert not use_triton(idx)


def test_refuses_bad_arguments():
    tables = _tables(2, 3, seed=2)
    with pytest.raises(ValueError, match="indices must be int"):
        paged_slots_triton(tables, torch.zeros(3, 1, dtype=torch.int64), 4)
    with pytest.raises(ValueError, match="block_size"):
        paged_slots_triton(tables, torch.zeros(2, 1, dtype=torch.int64), 0)
