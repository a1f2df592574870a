"""A NaN written to a cache reads back as a NaN, through the Triton writers and readers as through
their torch twins: a fault upstream of the KV cache must reach the logits' finiteness check, not
turn into finite values on the way.

Before session 6 the Triton writer clamped a NaN to ±448 (tl.minimum/maximum return the other
operand), took the group's scale from a NaN-dropping max, and its software decoder read the NaN
code 0x7F as 480: a NaN key became an ordinary one. The twins (torch's float8 cast, amax and view)
keep it."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from mxserve.kernels.attention_ops.triton_ops import kv_insert_triton
from mxserve.kernels.cache import PagedIndexerKeyCache, PagedKVCache
from mxserve.kernels.sparse_attention.reference import sparse_attention_ref
from mxserve.kernels.sparse_attention.triton import sparse_attention_triton
from mxserve.model.fused_ref import kv_insert_ref
from mxserve.model.rope import inverse_frequencies

DEVICE = "cpu" if not torch.cuda.is_available() else "cuda"


def _rows(n: int, dim: int, nan_rows: tuple[int, ...]) -> torch.Tensor:
    g = torch.Generator().manual_seed(2)
    kv = (torch.randn(n, dim, generator=g) * 3).bfloat16()
    for r in nan_rows:
        kv[r, 7] = float("nan")  # kv_norm spreads it over the whole row, as a real fault would
    return kv.to(DEVICE)


@pytest.mark.parametrize("kind", ["fp8_ds_mla", "indexer_fp8"])
def test_a_nan_row_is_written_as_nan_codes_and_reads_back_as_nan(kind):
    dim = 512 if kind == "fp8_ds_mla" else 128
    if kind == "fp8_ds_mla":
        ours, ref = (PagedKVCache(2, 4, mode="fp8_ds_mla", head_dim=512, device=DEVICE) for _ in range(2))
    else:
        ours, ref = (PagedIndexerKeyCache(2, 4, device=DEVICE) for _ in range(2))
    kv, slots = _rows(5, dim, nan_rows=(1, 3)), torch.tensor([0, 1, 2, 5, 6], device=DEVICE)
    w = torch.ones(dim, device=DEVICE)
    pos, f = torch.arange(5, device=DEVICE), inverse_frequencies(64, 10000.0, None).to(DEVICE)
    kv_insert_triton(kv, w, 1e-6, pos, f, ours, slots)
    kv_insert_ref(kv, w, 1e-6, pos, f, ref, slots)
    got, want = ours.read(slots), ref.read(slots)
    assert want[[1, 3]].isnan().all(), "the twin itself must keep the NaN (the contract this test holds to)"
    assert torch.equal(got.isnan(), want.isnan()), f"NaN pattern differs: {got.isnan().sum(1)} vs {want.isnan().sum(1)}"
    finite = [0, 2, 4]
    assert torch.equal(got[finite], want[finite])


def test_sparse_attention_over_a_nan_key_is_nan_for_the_rows_that_see_it():
    cache = PagedKVCache(2, 4, mode="fp8_ds_mla", head_dim=512, device=DEVICE)
    kv = _rows(6, 512, nan_rows=(4,))
    pos, f = torch.arange(6, device=DEVICE), inverse_frequencies(64, 10000.0, None).to(DEVICE)
    kv_insert_ref(kv, torch.ones(512, device=DEVICE), 1e-6, pos, f, cache, torch.arange(6, device=DEVICE))
    q = torch.randn(3, 2, 512, generator=torch.Generator().manual_seed(4)).to(DEVICE)
    slots = torch.tensor([[0, 1, 2, 3], [0, 1, 4, -1], [4, 5, -1, -1]], device=DEVICE)  # rows 1 and 2 see the NaN
    sink = torch.zeros(2, device=DEVICE)
    got = sparse_attention_triton(q, [(cache, slots)], sink, 512**-0.5)
    want = sparse_attention_ref(q, [(cache, slots)], sink, 512**-0.5)
    assert want[1:].isnan().all() and not want[0].isnan().any()
    assert torch.equal(got.isnan(), want.isnan())
