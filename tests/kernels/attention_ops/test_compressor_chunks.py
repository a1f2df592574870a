"""Issue 11 acceptance (CI, interpreter): the compressor emits exactly the reference's entries for
prefill chunk sizes 1, 3, 4, 5, 128, 129.

Through the model's own `compressor_step` (state rows written by `kernels.compressor_state_write`,
then `kernels.compressor_emit`): the Triton state-write and emit kernels run chunk by chunk vs the
references (`compressor_state_write_ref`, `compressor_emit_ref`) run as one prefill. Compared: every byte of the entry cache and of the state cache (tolerance none). Cases:
CSA (ratio 4, overlapping windows) into an fp32 cache in exact numerics; CSA's indexer keys into
the FP8 indexer key cache and HCA (no overlap) into the fp8_ds_mla cache, both in faithful
numerics (bf16 pooled rounding). Pages are shuffled (slots jump pages) and page strides are
not multiples of the page's bytes, so an address bug writes a byte the reference does not.
Sequence lengths: 3 chunks of each size (at least 13 tokens), so windows straddle chunk edges.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

pytest.importorskip("triton")

from mxserve.kernels.attention_ops.state_write import compressor_state_write_triton
from mxserve.kernels.attention_ops.triton_ops import compressor_emit_triton
from mxserve.kernels.cache import CompressorStateCache, PagedIndexerKeyCache, PagedKVCache
from mxserve.model.compressor import CompressorSpec, CompressorWeights, compressor_addresses, compressor_step
from mxserve.model.kernel_set import REFERENCE_KERNELS
from mxserve.model.rope import inverse_frequencies

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
HIDDEN = 64  # D, the block input width (small: the linears are not under test)
BLOCK = 8  # cache entries per page
SENTINEL = 0x5A
CHUNK_SIZES = [1, 3, 4, 5, 128, 129]

# name: (ratio, overlap, entry dim, entry cache, out dtype, round pooled to bf16)
CASES = {
    "csa-fp32-exact": (4, True, 64, "fp32", torch.float32, False),
    "csa-indexer-fp8": (4, True, 128, "indexer", torch.bfloat16, True),
    "hca-fp8_ds_mla": (8, False, 512, "fp8_ds_mla", torch.bfloat16, True),
}


def _table(num_pages: int, seed: int) -> torch.Tensor:
    return torch.randperm(num_pages, generator=torch.Generator().manual_seed(seed)).to(DEVICE)


def _slots_of(table: torch.Tensor):
    def slots(index: torch.Tensor) -> torch.Tensor:
        page = table[index.clamp(min=0) // BLOCK]
        return torch.where(index >= 0, page * BLOCK + index.clamp(min=0) % BLOCK, -1)

    return slots


def _caches(spec: CompressorSpec, cache_kind: str, length: int):
    state_pages = -(-length // BLOCK)
    row_bytes = 2 * spec.width * 4
    state = CompressorStateCache(state_pages, BLOCK, 2 * spec.width, block_stride_bytes=BLOCK * row_bytes + 12,
                                 device=DEVICE)
    entry_pages = -(-(length // spec.ratio) // BLOCK) + 1
    if cache_kind == "indexer":
        entries = PagedIndexerKeyCache(entry_pages, BLOCK, head_dim=spec.dim, block_stride_bytes=BLOCK * 132 + 7,
                                       device=DEVICE)
    else:
        page = BLOCK * (584 if cache_kind == "fp8_ds_mla" else spec.dim * 4)
        entries = PagedKVCache(entry_pages, BLOCK, mode=cache_kind, head_dim=spec.dim, block_stride_bytes=page + 5,
                               device=DEVICE)
    for c in (state, entries):
        c.buffer.fill_(SENTINEL)
    return state, entries


def _run(case: str, length: int, chunk: int, kernels) -> tuple[torch.Tensor, torch.Tensor]:
    ratio, overlap, dim, cache_kind, out_dtype, round_bf16 = CASES[case]
    spec = CompressorSpec(ratio, overlap=overlap, dim=dim)
    g = torch.Generator().manual_seed(7)
    weights = CompressorWeights(
        wkv=(torch.randn(spec.width, HIDDEN, generator=g) * 0.2).to(DEVICE),
        wgate=(torch.randn(spec.width, HIDDEN, generator=g) * 0.2).to(DEVICE),
        ape=(torch.randn(ratio, spec.width, generator=g) * 0.5).to(DEVICE),
        norm=(1 + 0.1 * torch.randn(dim, generator=g)).to(DEVICE),
    )
    x = torch.randn(length, HIDDEN, generator=g).to(DEVICE)
    x[5] *= 30.0  # one loud token: the per-channel softmax is far from uniform
    state, entries = _caches(spec, cache_kind, length)
    state_slots, entry_slots = _slots_of(_table(state.num_blocks, 1)), _slots_of(_table(entries.num_blocks, 2))
    inv_freq = inverse_frequencies(64, 10000.0, None).to(DEVICE)
    for start in range(0, length, chunk):
        end = min(start + chunk, length)
        positions = torch.arange(start, end, device=DEVICE)
        addresses = compressor_addresses(positions, spec, state_slots_of=state_slots, entry_slots_of=entry_slots)
        compressor_step(
            x[start:end], positions, weights, spec, addresses, state_cache=state, entry_cache=entries,
            inv_freq=inv_freq, rms_eps=1e-6, out_dtype=out_dtype, round_pooled_to_bf16=round_bf16, kernels=kernels,
        )
    return state.buffer, entries.buffer


def _first_mismatch(a: torch.Tensor, b: torch.Tensor) -> str:
    idx = (a != b).nonzero()
    return f"{len(idx)} bytes differ, first at {tuple(int(i) for i in idx[0])}: {int(a[tuple(idx[0])])} vs " \
           f"{int(b[tuple(idx[0])])}" if len(idx) else "equal"


TRITON_EMIT = dataclasses.replace(REFERENCE_KERNELS, compressor_emit=compressor_emit_triton,
                                  compressor_state_write=compressor_state_write_triton)


@pytest.mark.parametrize("chunk", CHUNK_SIZES)
@pytest.mark.parametrize("case", list(CASES))
def test_triton_emit_in_chunks_equals_reference_prefill(case, chunk):
    length = max(3 * chunk, 13)
    if chunk >= 128 and case != "csa-fp32-exact":
        length = chunk + CASES[case][0] + 3  # two chunks: keeps the interpreter run short
    ref_state, ref_entries = _run(case, length, length, REFERENCE_KERNELS)
    state, entries = _run(case, length, chunk, TRITON_EMIT)
    assert torch.equal(state, ref_state), "state rows: " + _first_mismatch(state, ref_state)
    assert torch.equal(entries, ref_entries), "entries: " + _first_mismatch(entries, ref_entries)
    ratio = CASES[case][0]
    assert int((ref_entries != SENTINEL).sum()) > 0 and length // ratio > 0  # entries were really emitted
