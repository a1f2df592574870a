"""PageLayout: the address formulas of spec §8.1/§8.2, default strides, and the checks."""

from __future__ import annotations

import pytest
import torch

from mxserve.kernels.cache import PageLayout, default_kv_block_stride_bytes, round_up


def test_addresses_follow_the_spec_formulas():
    layout = PageLayout(num_blocks=5, block_size=3, data_bytes=576, scale_bytes=8, block_stride_bytes=2000)
    slots = torch.tensor([0, 1, 2, 3, 7, 14, -1])
    data, scale = layout.addresses(slots)
    want_data, want_scale = [], []
    for slot in slots.tolist():
        if slot < 0:
            want_data.append(-1)
            want_scale.append(-1)
            continue
        block_id, pos = divmod(slot, 3)
        want_data.append(block_id * 2000 + pos * 576)
        want_scale.append(block_id * 2000 + 3 * 576 + pos * 8)
    assert data.tolist() == want_data
    assert scale.tolist() == want_scale
    assert data.dtype == scale.dtype == torch.int64


def test_addresses_keep_shape():
    layout = PageLayout(2, 4, 128, 4, 4 * 132)
    data, scale = layout.addresses(torch.tensor([[0, 5], [-1, 7]]))
    assert data.shape == scale.shape == (2, 2)
    assert data.tolist() == [[0, 528 + 128], [-1, 528 + 3 * 128]]
    assert scale.tolist() == [[512, 528 + 512 + 4], [-1, 528 + 512 + 12]]


def test_default_strides_match_flashmla_padding():
    assert default_kv_block_stride_bytes("fp8_ds_mla", 64) == 37440  # round_up(37376, 576)
    assert default_kv_block_stride_bytes("fp8_ds_mla", 32) == 19008
    assert default_kv_block_stride_bytes("fp8_ds_mla", 2) == round_up(2 * 584, 576) == 1728
    assert default_kv_block_stride_bytes("bf16", 16, head_dim=96) == 16 * 96 * 2
    assert default_kv_block_stride_bytes("fp32", 16, head_dim=96) == 16 * 96 * 4


def test_stride_smaller_than_page_is_rejected():
    with pytest.raises(ValueError, match="smaller than one page"):
        PageLayout(2, 4, 576, 8, 4 * 584 - 1)


@pytest.mark.parametrize("slot", [-2, 8, 100])
def test_out_of_range_slots_are_rejected(slot):
    layout = PageLayout(2, 4, 576, 8, 4 * 584)
    with pytest.raises(ValueError, match=f"slot {slot} out of range"):
        layout.addresses(torch.tensor([0, slot]))


def test_float_slots_are_rejected():
    with pytest.raises(ValueError, match="integer"):
        PageLayout(2, 4, 576, 8, 4 * 584).addresses(torch.tensor([1.0]))
