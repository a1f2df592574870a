"""PagedKVCache write -> read round trips, modes, slot semantics and construction checks.

fp8_ds_mla reads must equal `decode_ds_mla(encode_ds_mla(x))` bit for bit; bf16 mode equals
the bf16 rounding of x; fp32 mode is exact. Duplicate valid slots in one write are an error
(documented choice); slot -1 writes nothing and reads zeros.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mxserve.formats import decode_ds_mla, encode_ds_mla
from mxserve.kernels.cache import PagedKVCache, default_kv_block_stride_bytes


def _x(n: int, dim: int = 512, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, dim, generator=g) * torch.exp2(torch.randint(-6, 7, (n, 1), generator=g).float())


def test_fp8_round_trip_is_the_codec_bit_exactly():
    cache = PagedKVCache(4, 8, block_stride_bytes=default_kv_block_stride_bytes("fp8_ds_mla", 8) + 1000)
    slots = torch.tensor([31, 0, 8, 7, 16, 15, 9])
    x = _x(len(slots))
    cache.write(slots, x)
    assert torch.equal(cache.read(slots), decode_ds_mla(encode_ds_mla(x)))
    # Same values whatever order / shape they are read in.
    perm = torch.tensor([[6, 0], [3, 3]])
    assert torch.equal(cache.read(slots[perm]), decode_ds_mla(encode_ds_mla(x))[perm])


def test_bf16_input_accepted_and_equivalent():
    cache = PagedKVCache(2, 4)
    x = _x(3).bfloat16()
    cache.write(torch.tensor([1, 2, 5]), x)
    assert torch.equal(cache.read(torch.tensor([1, 2, 5])), decode_ds_mla(encode_ds_mla(x.float())))


@pytest.mark.parametrize("head_dim", [512, 96, 1])
def test_bf16_mode_is_exact_to_bf16_rounding(head_dim):
    cache = PagedKVCache(3, 5, mode="bf16", head_dim=head_dim)
    assert cache.bytes_per_entry == head_dim * 2
    slots = torch.tensor([14, 0, 4, 5])
    x = _x(4, head_dim)
    cache.write(slots, x)
    assert torch.equal(cache.read(slots), x.bfloat16().float())


def test_fp32_mode_is_exact_and_any_stride_works():
    cache = PagedKVCache(3, 2, mode="fp32", head_dim=7, block_stride_bytes=2 * 7 * 4 + 3)
    x = _x(6, 7)
    cache.write(torch.arange(6), x)
    assert torch.equal(cache.read(torch.arange(6)), x)


def test_invalid_slots_read_zeros_and_write_nothing():
    cache = PagedKVCache(2, 4)
    x = _x(3)
    cache.write(torch.tensor([-1, 2, -1]), x)
    got = cache.read(torch.tensor([-1, 2, 3]))
    assert torch.equal(got[0], torch.zeros(512))
    assert torch.equal(got[1], decode_ds_mla(encode_ds_mla(x[1:2]))[0])
    assert torch.equal(got[2], torch.zeros(512))  # never written: zero bytes decode to 0
    data, scales = cache.read_bytes(torch.tensor([-1, 2]))
    assert data.shape == (2, 576) and scales.shape == (2, 8)
    assert not bool(data[0].any()) and not bool(scales[0].any())


def test_later_write_overwrites_and_duplicates_in_one_write_raise():
    cache = PagedKVCache(2, 4, mode="fp32", head_dim=3)
    cache.write(torch.tensor([5]), torch.ones(1, 3))
    cache.write(torch.tensor([5]), torch.full((1, 3), 2.0))
    assert torch.equal(cache.read(torch.tensor([5])), torch.full((1, 3), 2.0))
    with pytest.raises(ValueError, match="slot 5 is written more than once"):
        cache.write(torch.tensor([5, -1, 5]), torch.zeros(3, 3))
    cache.write(torch.tensor([-1, -1]), torch.zeros(2, 3))  # repeated -1 is fine


def test_empty_writes_and_reads():
    cache = PagedKVCache(1, 4)
    cache.write(torch.zeros(0, dtype=torch.int64), torch.zeros(0, 512))
    assert cache.read(torch.zeros(0, dtype=torch.int64)).shape == (0, 512)
    assert not bool(cache.buffer.any())


def test_caller_buffer_is_used_in_place():
    buffer = torch.zeros(3 * 2880 + 10, dtype=torch.uint8)
    cache = PagedKVCache(3, 4, buffer=buffer)
    cache.write(torch.tensor([8]), _x(1))  # block 2, pos 0
    assert buffer.data_ptr() == cache.buffer.data_ptr()
    assert bool(buffer[2 * 2880 : 2 * 2880 + 576].any())


def test_properties():
    cache = PagedKVCache(3, 64)
    assert (cache.num_blocks, cache.block_size, cache.block_stride_bytes, cache.bytes_per_entry) == (
        3,
        64,
        37440,
        584,
    )
    assert cache.buffer.dtype == torch.uint8 and cache.buffer.shape == (3 * 37440,)
    assert cache.num_slots == 192 and cache.head_dim == 512


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(head_dim=448), "needs head_dim=512, rope_dim=64"),
        (dict(rope_dim=32), "needs head_dim=512, rope_dim=64"),
        (dict(mode="fp8"), "unknown KV cache mode"),
        (dict(block_stride_bytes=4 * 584 - 1), "smaller than one page"),
        (dict(buffer=torch.zeros(100, dtype=torch.uint8)), "buffer has 100 bytes"),
        (dict(buffer=torch.zeros(10000, dtype=torch.int8)), "contiguous uint8"),
    ],
)
def test_construction_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        PagedKVCache(2, 4, **kwargs)


def test_write_shape_and_slot_errors():
    cache = PagedKVCache(2, 4)
    with pytest.raises(ValueError, match="entries shape"):
        cache.write(torch.tensor([0, 1]), torch.zeros(2, 448))
    with pytest.raises(ValueError, match="out of range"):
        cache.write(torch.tensor([8]), torch.zeros(1, 512))
    with pytest.raises(ValueError, match="out of range"):
        cache.read(torch.tensor([-3]))


@settings(max_examples=40, deadline=None)
@given(
    block_size=st.integers(1, 6),
    num_blocks=st.integers(1, 4),
    extra_stride=st.integers(0, 700),
    data=st.data(),
)
def test_hypothesis_random_slot_sets_fp8(block_size, num_blocks, extra_stride, data):
    num_slots = block_size * num_blocks
    stride = default_kv_block_stride_bytes("fp8_ds_mla", block_size) + extra_stride
    cache = PagedKVCache(num_blocks, block_size, block_stride_bytes=stride)
    # Two writes of unique slots (the second may overwrite the first), with padding lanes.
    state: dict[int, torch.Tensor] = {}
    for call in range(2):
        chosen = data.draw(st.lists(st.integers(0, num_slots - 1), unique=True, max_size=num_slots))
        pads = data.draw(st.integers(0, 2))
        slots = torch.tensor(chosen + [-1] * pads, dtype=torch.int64)
        slots = slots[torch.randperm(len(slots), generator=torch.Generator().manual_seed(call))]
        x = _x(len(slots), seed=len(state) + call)
        cache.write(slots, x)
        want = decode_ds_mla(encode_ds_mla(x))
        for i, slot in enumerate(slots.tolist()):
            if slot >= 0:
                state[slot] = want[i]
    everything = cache.read(torch.arange(-1, num_slots))
    for slot in range(-1, num_slots):
        expected = state.get(slot, torch.zeros(512))
        assert torch.equal(everything[slot + 1], expected), f"slot {slot}"
    # Padding of every page untouched by any write.
    for b in range(num_blocks):
        assert not bool(cache.buffer[b * stride + block_size * 584 : (b + 1) * stride].any())
