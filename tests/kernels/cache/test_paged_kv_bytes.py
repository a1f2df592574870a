"""The fp8_ds_mla cache layout pinned by bytes (spec §8.1; field-notes §3).

The expected offsets are restated here as plain Python arithmetic, independent of the cache's
own address function:
    data(slot)   = block_id * stride + pos * 576
    scales(slot) = block_id * stride + B * 576 + pos * 8
and the expected bytes come from the formats codec (`encode_ds_mla_parts`). Everything the
writer did not address must keep its sentinel value (padding, unwritten entries, slot -1).
"""

from __future__ import annotations

import pytest
import torch

from mxserve.formats import decode_ds_mla, encode_ds_mla, encode_ds_mla_parts
from mxserve.kernels.cache import PagedKVCache, default_kv_block_stride_bytes

B = 4
NUM_BLOCKS = 3
SENTINEL = 0xA5
DEFAULT_STRIDE = default_kv_block_stride_bytes("fp8_ds_mla", B)  # round_up(2336, 576) = 2880
# Larger than one page, and deliberately not a multiple of 576 or even of 2 (allocator-given).
STRIDES = [DEFAULT_STRIDE, DEFAULT_STRIDE + 577, 4 * 584 + 1]


def _entries(n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    # Per-entry magnitudes spread over many binades so the scale bytes differ between entries.
    mag = torch.exp2(torch.randint(-8, 9, (n, 1), generator=g).float())
    return torch.randn(n, 512, generator=g) * mag


def _cache(stride: int) -> PagedKVCache:
    buffer = torch.full((NUM_BLOCKS * stride,), SENTINEL, dtype=torch.uint8)
    return PagedKVCache(NUM_BLOCKS, B, mode="fp8_ds_mla", block_stride_bytes=stride, buffer=buffer)


def _spec_offsets(slot: int, stride: int) -> tuple[int, int]:
    block_id, pos = divmod(slot, B)
    return block_id * stride + pos * 576, block_id * stride + B * 576 + pos * 8


@pytest.mark.parametrize("stride", STRIDES)
def test_bytes_land_at_spec_offsets_and_nothing_else_changes(stride):
    cache = _cache(stride)
    assert cache.buffer.numel() == NUM_BLOCKS * stride
    # Crosses both page boundaries (3|4, 7|8), skips slots, includes padding lanes (-1).
    slots = [3, 4, -1, 0, 7, 8, 11, -1, 5]
    x = _entries(len(slots), seed=stride)
    x[torch.tensor(slots) == -1] = float("nan")  # a padding lane's values must never be encoded
    cache.write(torch.tensor(slots), x)

    written = torch.zeros(cache.buffer.numel(), dtype=torch.bool)
    buf = cache.buffer
    for i, slot in enumerate(slots):
        if slot < 0:
            continue
        data, scales = encode_ds_mla_parts(x[i : i + 1])
        d, s = _spec_offsets(slot, stride)
        assert torch.equal(buf[d : d + 576], data[0]), f"data bytes of slot {slot} at {d}"
        assert torch.equal(buf[s : s + 8], scales[0]), f"scale bytes of slot {slot} at {s}"
        # The split parts are the logical 584-byte entry of the codec, reordered.
        assert torch.equal(torch.cat([buf[d : d + 576], buf[s : s + 8]]), encode_ds_mla(x[i : i + 1])[0])
        written[d : d + 576] = True
        written[s : s + 8] = True
    untouched = buf[~written]
    assert bool((untouched == SENTINEL).all()), (
        f"{int((untouched != SENTINEL).sum())} bytes outside written entries changed"
    )
    # Padding bytes specifically (B*584 .. stride-1 of every page) are all sentinel.
    for block_id in range(NUM_BLOCKS):
        pad = buf[block_id * stride + B * 584 : (block_id + 1) * stride]
        assert pad.numel() == stride - B * 584
        assert bool((pad == SENTINEL).all())


def test_entry_addresses_agree_with_restated_formula():
    stride = DEFAULT_STRIDE + 577
    cache = _cache(stride)
    slots = torch.arange(-1, NUM_BLOCKS * B)
    data, scales = cache.entry_addresses(slots)
    for slot, d, s in zip(slots.tolist(), data.tolist(), scales.tolist(), strict=True):
        assert (d, s) == ((-1, -1) if slot < 0 else _spec_offsets(slot, stride))


def test_only_padding_lanes_write_nothing():
    cache = _cache(DEFAULT_STRIDE)
    cache.write(torch.tensor([-1, -1]), torch.full((2, 512), float("nan")))
    assert bool((cache.buffer == SENTINEL).all())


@pytest.mark.parametrize("stride", STRIDES)
def test_token_interleaved_reader_reads_wrong_values(stride):
    """A reader that treats each page as [B, 584] rows (the logical shape) reads garbage."""
    cache = _cache(stride)
    n = NUM_BLOCKS * B
    x = _entries(n, seed=7)
    cache.write(torch.arange(n), x)
    truth = decode_ds_mla(encode_ds_mla(x))
    assert torch.equal(cache.read(torch.arange(n)), truth)  # the real reader is right

    pages = torch.stack([cache.buffer[b * stride : b * stride + B * 584] for b in range(NUM_BLOCKS)])
    interleaved = decode_ds_mla(pages.reshape(n, 584))
    for slot in range(n):
        assert not torch.allclose(interleaved[slot], truth[slot], equal_nan=False), (
            f"slot {slot} read right by accident"
        )

    # The other field bug: `.contiguous()` on the [num_blocks, B, 584] view drops the stride.
    # Even with the split layout understood, page b is then looked for at b * B * 584.
    if stride != B * 584:
        packed = cache.buffer[: NUM_BLOCKS * B * 584].reshape(NUM_BLOCKS, B * 584)
        data = packed[:, : B * 576].reshape(n, 576)
        scales = packed[:, B * 576 :].reshape(n, 8)
        lost = decode_ds_mla(torch.cat([data, scales], -1))
        for slot in range(B, n):  # page 0 starts at 0 either way; every later page is misread
            assert not torch.allclose(lost[slot], truth[slot]), f"slot {slot} read right by accident"
