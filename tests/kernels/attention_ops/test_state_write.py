"""The compressor state-row write: Triton kernel (interpreted on the CPU) vs its twin, bit for bit.

Rows land in a state cache whose page stride is not a multiple of the page's bytes (B*row + 12),
on shuffled pages, with slot -1 padding rows and positions spread over every phase of the ape
table, so an address or phase bug writes a word the twin does not. The whole buffer (sentinel
bytes included) is compared, so a write that should not happen is caught too.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from mxserve.kernels.attention_ops.state_write import compressor_state_write_triton
from mxserve.kernels.cache import CompressorStateCache
from mxserve.model.fused_ref import compressor_state_write_ref

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
BLOCK = 4
SENTINEL = 0x3C


def _state_cache(width: int, num_pages: int) -> CompressorStateCache:
    cache = CompressorStateCache(num_pages, BLOCK, 2 * width, block_stride_bytes=BLOCK * 2 * width * 4 + 12,
                                 device=DEVICE)
    cache.buffer.fill_(SENTINEL)
    return cache


def _inputs(n: int, width: int, ratio: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(n, width, generator=g).to(DEVICE)
    z = (torch.randn(n, width, generator=g) * 3).to(DEVICE)
    ape = torch.randn(ratio, width, generator=g).to(DEVICE)
    positions = torch.randint(0, 1000, (n,), generator=g).to(DEVICE)
    return a, z, ape, positions


@pytest.mark.parametrize(("width", "ratio"), [(256, 4), (512, 128), (1024, 4), (40, 3)])
def test_state_write_bytes_equal_twin(width, ratio):
    n, num_pages = 11, 6
    a, z, ape, positions = _inputs(n, width, ratio, seed=width + ratio)
    perm = torch.randperm(num_pages * BLOCK, generator=torch.Generator().manual_seed(3))[:n].to(DEVICE)
    slots = torch.where(torch.arange(n, device=DEVICE) % 4 == 3, -1, perm)  # every 4th row is padding
    want, got = _state_cache(width, num_pages), _state_cache(width, num_pages)
    compressor_state_write_ref(want, slots, a, z, ape, positions, ratio)
    compressor_state_write_triton(got, slots, a, z, ape, positions, ratio)
    diff = (got.buffer != want.buffer).nonzero()
    assert diff.numel() == 0, f"{len(diff)} bytes differ, first at byte {int(diff[0])}"
    written = want.read(slots[slots >= 0])
    assert torch.equal(written[:, :width], a[slots >= 0])  # the twin really wrote the rows


def test_state_write_with_no_rows_or_only_padding_writes_nothing():
    width, ratio = 64, 4
    cache = _state_cache(width, 2)
    before = cache.buffer.clone()
    empty = torch.empty(0, width, device=DEVICE)
    no_ids = torch.empty(0, dtype=torch.int64, device=DEVICE)
    compressor_state_write_triton(cache, no_ids, empty, empty, torch.zeros(ratio, width, device=DEVICE), no_ids, ratio)
    a, z, ape, positions = _inputs(3, width, ratio, seed=1)
    compressor_state_write_triton(cache, torch.full((3,), -1, device=DEVICE), a, z, ape, positions, ratio)
    assert torch.equal(cache.buffer, before)


def test_state_write_refuses_bad_arguments(monkeypatch):
    monkeypatch.setenv("MXSERVE_CHECK_SLOTS", "1")  # slot values are checked on a GPU only when asked (a host read)
    width, ratio = 64, 4
    cache = _state_cache(width, 2)
    a, z, ape, positions = _inputs(2, width, ratio, seed=2)
    slots = torch.tensor([0, 1], device=DEVICE)
    with pytest.raises(ValueError, match="z must be fp32"):
        compressor_state_write_triton(cache, slots, a, z.to(torch.bfloat16), ape, positions, ratio)
    with pytest.raises(ValueError, match="ape must be"):
        compressor_state_write_triton(cache, slots, a, z, ape[:2], positions, ratio)
    with pytest.raises(ValueError, match="more than once"):
        compressor_state_write_triton(cache, torch.tensor([1, 1], device=DEVICE), a, z, ape, positions, ratio)
    with pytest.raises(ValueError, match="a must be fp32"):
        compressor_state_write_triton(cache, slots, a[:, :32], z, ape, positions, ratio)
