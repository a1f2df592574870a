"""`SlotRows` (kernels/cache/slot_rows.py): save a slot list's bytes in several caches of one
layout, overwrite them, restore a chosen subset — exactly those rows get their old bytes back,
every other byte of every buffer is what it was before the restore (−1 rows write nothing).
Both forms: the torch twin, and the Triton kernels under the interpreter (CUDA's form)."""

from __future__ import annotations

import os

import pytest
import torch

from mxserve.kernels.cache import CompressorStateCache, PagedKVCache, SlotRows

CUDA = torch.cuda.is_available()


@pytest.fixture(params=["torch", "triton", pytest.param("cuda", marks=pytest.mark.gpu)])
def backend(request, monkeypatch):
    if request.param == "cuda":
        if not CUDA:
            pytest.skip("needs CUDA")
        torch.set_default_device("cuda")
        request.addfinalizer(lambda: torch.set_default_device(None))
    elif request.param == "triton":
        if os.environ.get("TRITON_INTERPRET") != "1":
            pytest.skip("needs the Triton interpreter")
        monkeypatch.setenv("MXSERVE_TRITON_SLOT_ROWS", "1")
    return request.param


def _random_fill(cache, gen: torch.Generator) -> None:
    cache.buffer.copy_(torch.randint(0, 256, cache.buffer.shape, dtype=torch.uint8, generator=gen, device="cpu"))


@pytest.mark.parametrize("make", [
    lambda: PagedKVCache(3, 4, mode="fp8_ds_mla"),  # data + scale parts, a padded page stride
    lambda: CompressorStateCache(3, 4, row_width=8),  # one fp32 part
], ids=["ds_mla", "state_rows"])
def test_restore_puts_back_exactly_the_chosen_rows(make, backend):
    gen = torch.Generator(device="cpu").manual_seed(0)
    caches = [make(), make()]
    for cache in caches:
        _random_fill(cache, gen)
    slots = torch.tensor([5, -1, 0, 11, -1, 7])
    rows = SlotRows(caches[0], slots)
    assert rows._triton == (backend != "torch")
    saved = [rows.save(cache) for cache in caches]
    before = [cache.buffer.clone() for cache in caches]
    for cache in caches:  # the verify's writes: new bytes at every valid slot
        data = torch.randint(0, 256, (4, cache.layout.data_bytes), dtype=torch.uint8, generator=gen, device="cpu")
        scales = torch.randint(0, 256, (4, cache.layout.scale_bytes), dtype=torch.uint8, generator=gen, device="cpu")
        offsets_d, offsets_s = cache.layout.addresses(torch.tensor([5, 0, 11, 7]))
        for i in range(4):
            cache.buffer[offsets_d[i]: offsets_d[i] + cache.layout.data_bytes] = data[i]
            cache.buffer[offsets_s[i]: offsets_s[i] + cache.layout.scale_bytes] = scales[i]
    written = [cache.buffer.clone() for cache in caches]
    chosen = torch.tensor([True, True, False, True, False, False])  # slots 5 and 11 roll back; row 1 is −1
    for cache, data in zip(caches, saved, strict=True):
        rows.restore(cache, data, chosen)
    for cache, old, new in zip(caches, before, written, strict=True):
        want = new.clone()
        for slot in (5, 11):
            d, s = (o.item() for o in cache.layout.addresses(torch.tensor(slot)))
            want[d: d + cache.layout.data_bytes] = old[d: d + cache.layout.data_bytes]
            want[s: s + cache.layout.scale_bytes] = old[s: s + cache.layout.scale_bytes]
        assert torch.equal(cache.buffer, want)


def test_a_list_without_valid_slots_changes_nothing(backend):
    cache = PagedKVCache(2, 4, mode="fp8_ds_mla")
    _random_fill(cache, torch.Generator(device="cpu").manual_seed(1))
    rows = SlotRows(cache, torch.tensor([-1, -1, -1]))
    saved = rows.save(cache)
    before = cache.buffer.clone()
    rows.restore(cache, saved, torch.tensor([True, False, True]))
    assert torch.equal(cache.buffer, before)


def test_a_cache_of_another_layout_is_refused(backend):
    rows = SlotRows(PagedKVCache(2, 4, mode="fp8_ds_mla"), torch.tensor([1]))
    with pytest.raises(ValueError, match="layout"):
        rows.save(PagedKVCache(3, 4, mode="fp8_ds_mla"))
