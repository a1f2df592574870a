"""PagedIndexerKeyCache: spec §8.2 FP8 page layout pinned by bytes, round trips, exact modes.

Page layout restated: codes(slot) = block_id*stride + pos*128; scale(slot) = block_id*stride +
B*128 + pos*4, the scale stored as the 4 little-endian bytes of an fp32 power of two.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mxserve.formats import decode_indexer_key_fp8, encode_indexer_key_fp8
from mxserve.kernels.cache import PagedIndexerKeyCache

SENTINEL = 0x5A


def _keys(n: int, dim: int = 128, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, dim, generator=g) * torch.exp2(torch.randint(-5, 6, (n, 1), generator=g).float())


def _fp8_truth(k: torch.Tensor) -> torch.Tensor:
    codes, scale = encode_indexer_key_fp8(k)
    return decode_indexer_key_fp8(codes, scale).float()


@pytest.mark.parametrize("stride", [3 * 132, 3 * 132 + 61])
def test_fp8_bytes_at_spec_offsets(stride):
    block_size, num_blocks = 3, 3
    buffer = torch.full((num_blocks * stride,), SENTINEL, dtype=torch.uint8)
    cache = PagedIndexerKeyCache(num_blocks, block_size, block_stride_bytes=stride, buffer=buffer)
    assert cache.bytes_per_entry == 132
    slots = [2, 3, -1, 8, 4]
    k = _keys(len(slots))
    cache.write(torch.tensor(slots), k)
    written = torch.zeros_like(buffer, dtype=torch.bool)
    for i, slot in enumerate(slots):
        if slot < 0:
            continue
        codes, scale = encode_indexer_key_fp8(k[i : i + 1])
        block_id, pos = divmod(slot, block_size)
        c = block_id * stride + pos * 128
        s = block_id * stride + block_size * 128 + pos * 4
        assert torch.equal(buffer[c : c + 128], codes[0])
        stored_scale = buffer[s : s + 4].clone().view(torch.float32)
        assert stored_scale.item() == scale.reshape(-1)[0].item()
        mantissa, _ = torch.frexp(stored_scale)
        assert mantissa.item() == 0.5  # a power of two
        written[c : c + 128] = True
        written[s : s + 4] = True
    assert bool((buffer[~written] == SENTINEL).all())


def test_fp8_round_trip_equals_codec():
    cache = PagedIndexerKeyCache(4, 5)
    slots = torch.tensor([19, 0, 5, 4, 10])
    k = _keys(5, seed=3)
    cache.write(slots, k)
    assert torch.equal(cache.read(slots), _fp8_truth(k))
    assert torch.equal(cache.read(torch.tensor([-1, 1])), torch.zeros(2, 128))


@pytest.mark.parametrize(("mode", "dtype"), [("bf16", torch.bfloat16), ("fp32", torch.float32)])
def test_exact_modes(mode, dtype):
    cache = PagedIndexerKeyCache(2, 4, mode=mode, head_dim=64)
    k = _keys(8, 64)
    cache.write(torch.arange(8), k)
    assert torch.equal(cache.read(torch.arange(8)), k.to(dtype).float())


def test_errors():
    with pytest.raises(ValueError, match="128-dim"):
        PagedIndexerKeyCache(2, 4, head_dim=64)
    with pytest.raises(ValueError, match="unknown indexer cache mode"):
        PagedIndexerKeyCache(2, 4, mode="mxfp4")
    cache = PagedIndexerKeyCache(2, 4)
    with pytest.raises(ValueError, match="more than once"):
        cache.write(torch.tensor([1, 1]), _keys(2))


@settings(max_examples=30, deadline=None)
@given(block_size=st.integers(1, 5), num_blocks=st.integers(1, 4), extra=st.integers(0, 300), data=st.data())
def test_hypothesis_random_slot_sets(block_size, num_blocks, extra, data):
    n = block_size * num_blocks
    cache = PagedIndexerKeyCache(num_blocks, block_size, block_stride_bytes=block_size * 132 + extra)
    chosen = data.draw(st.lists(st.integers(0, n - 1), unique=True, max_size=n))
    slots = torch.tensor([*chosen, -1], dtype=torch.int64)
    k = _keys(len(slots), seed=len(chosen))
    cache.write(slots, k)
    truth = _fp8_truth(k)
    got = cache.read(torch.arange(n))
    for slot in range(n):
        want = truth[chosen.index(slot)] if slot in chosen else torch.zeros(128)
        assert torch.equal(got[slot], want), f"slot {slot}"
