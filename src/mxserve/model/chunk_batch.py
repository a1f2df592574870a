"""The per-chunk attention steps of a varlen batch, run over all its chunks at once.

`attention_heads` used to run, for every sequence chunk of the batch, its own window slot map,
compressor steps and sparse-attention launch: some 10-40 launches per chunk per layer, and a
host-to-device table copy (a stream sync) per slot map. At 64 prompts the default model's prefill
step took 1334 ms against 64 ms for one prompt (H200, session 6 call 3, `benchmarks/batch_split.py`):
the step scaled with the number of sequences, not with the work.

Here each row carries its own sequence's block tables (`ChunkTables`: one host-to-device copy per
forward), so one slot map, one compressor step per compressor and one sparse-attention launch
serve every chunk. Only the CSA indexer's scoring and top-k stay per chunk: each chunk scores the
key list of its own sequence.

Row results are the per-chunk path's bits:
- slot maps, compressor rows and emits, scores and top-k are per-row computations over the same
  addresses (the chunks are different sequences, so their cache slots are disjoint and the order
  in which chunks write them changes nothing);
- a row's compressed-slot list is its per-chunk list followed by −1 up to the widest chunk's
  width. The sparse-attention kernel folds its key chunks in list order, and a chunk with no
  valid key has max −inf and sum 0, so folding it multiplies the running sums by exp(0) = 1 and
  adds 0: the same bits (the interpreter test compares the two paths bit for bit).

Off switch: MXSERVE_PER_CHUNK_ATTENTION=1 keeps the per-chunk loop; a forward with an observer
(verification) always takes it, because observers see values per sequence.

Once per forward, not per layer (the prefill step is eager and host-bound: every aten op and
launch of it is host time). The block tables are per sequence and shared by every layer with the
pool, and the positions are the same in every layer, so every slot map that does not depend on a
layer's data (the window's write and read slots, each compressor site's addresses, the visible
counts, the HCA and indexer candidate lists and their slots) is computed on first use and kept
for the rest of the forward, as `mxserve.model.decode_addresses` does for a decode step. Where
the slot map is a Triton launch (CUDA) the first use computes all of them in ONE launch
(`step_slot_maps`, the decode step's, over per-row tables); the twin path computes each on its
own. The tables travel to the device as one copy, and the sequences' capacity is ensured once
when they are built. Only the CSA layers' selected entries (their top-k, data) are mapped per
layer. Same integers either way (tests/model/test_prefill_maps.py). The default model's
one-prompt prefill, counted as the H200 runs it (`benchmarks/prefill_host_ops.py --launches`):
706 launches before (192 aten compute ops, mostly this address math, + 514 Triton, 49 of them
slot maps), 487 after (18 + 469: one step-maps launch and the 3 CSA layers' entry maps).

Off switch: MXSERVE_PREFILL_LAYER_MAPS=1 maps per layer, as before (tables rebuilt from a full
host comparison per layer, capacity ensured per layer); MXSERVE_PER_MAP_SLOTS=1 (decode's A/B
switch) keeps the memo but computes map by map.
"""

from __future__ import annotations

import os
import weakref

import torch

from mxserve.kernels.paged_slots import paged_slots, use_triton
from mxserve.model.forward_batch import ForwardBatch
from mxserve.model.kv_state import ModelCacheState, Pool
from mxserve.model.step_maps import StepAddressMaps

PER_CHUNK_ENV = "MXSERVE_PER_CHUNK_ATTENTION"
LAYER_MAPS_ENV = "MXSERVE_PREFILL_LAYER_MAPS"


def batched_chunks_enabled() -> bool:
    return os.environ.get(PER_CHUNK_ENV) != "1"


def shared_maps_enabled() -> bool:
    return os.environ.get(LAYER_MAPS_ENV) != "1"


class ChunkTables(StepAddressMaps):
    """Every row's block tables (those of its chunk's sequence) as one device tensor per pool, and
    the forward's layer-independent slot maps (module docstring), each computed once."""

    def __init__(self, state: ModelCacheState, batch: ForwardBatch, host: dict[Pool, list[list[int]]], *,
                 shared: bool = True, fused: bool | None = None) -> None:
        """`shared`: keep the maps for every layer (False: each accessor call computes afresh, the
        per-layer path). `fused`: all maps in one launch on first use (None: where the slot map
        is a Triton launch, unless MXSERVE_PER_MAP_SLOTS=1)."""
        positions = batch.positions
        device = positions.device
        if fused is None:
            fused = shared and use_triton(positions) and os.environ.get("MXSERVE_PER_MAP_SLOTS") != "1"
        super().__init__(state.config, state.block_size, fused=fused, shared=shared)
        self.batch = batch
        self.positions = positions
        self.host = host  # pool → per-chunk page lists (the cache key)
        self._positions_version = positions._version
        # Every pool's per-chunk tables (−1 padded to the pool's widest; ≥ 1 column: an empty table
        # maps every index to −1) and each row's chunk in one host buffer, so one copy to the device
        num_chunks = len(batch.chunks)
        pieces, shapes = [], []
        for tables in host.values():
            width = max([1, *(len(t) for t in tables)])
            pieces.append(torch.tensor([t + [-1] * (width - len(t)) for t in tables], dtype=torch.int64).flatten())
            shapes.append((num_chunks, width))
        pieces.append(torch.repeat_interleave(torch.arange(num_chunks), torch.tensor([c.num_tokens for c in batch.chunks])))
        flat = _to_device(torch.cat(pieces), device)
        views = flat.split([p.numel() for p in pieces])
        row_chunk = views[-1]
        self.chunk_tables: dict[Pool, torch.Tensor] = {}
        self.row_tables: dict[Pool, torch.Tensor] = {}
        for pool, view, shape in zip(host, views[:-1], shapes, strict=True):
            self.chunk_tables[pool] = view.view(shape)
            self.row_tables[pool] = self.chunk_tables[pool].index_select(0, row_chunk)

    @staticmethod
    def host_tables(state: ModelCacheState, batch: ForwardBatch) -> dict[Pool, list[list[int]]]:
        return {pool: [list(state.block_tables[pool].get(c.seq_id, ())) for c in batch.chunks] for pool in Pool}

    def still_valid(self, state: ModelCacheState, batch: ForwardBatch) -> bool:
        """Whether these tables and maps are `batch`'s now: the same batch object, its positions
        not written since, and every sequence's page lists equal to those they were built from."""
        if batch is not self.batch or batch.positions._version != self._positions_version:
            return False
        tables = state.block_tables
        return all([tables[pool].get(c.seq_id, []) for c in batch.chunks] == lists
                   for pool, lists in self.host.items())

    # ------------------------------------------------------------------ maps (StepAddressMaps)
    def tables_by_row(self) -> dict[Pool, torch.Tensor]:
        return self.row_tables

    def candidate_width(self, pool: Pool, ratio: int) -> int:
        return candidate_width(self.batch.chunks, ratio)

    def candidates(self, pool: Pool, ratio: int, num: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(entry ids, slots) [T, N] of a row's visible entries in `pool`, N the widest chunk's
        visible count (`candidate_width`) unless given: each row's list is its chunk's, then −1."""
        return super().candidates(pool, ratio, candidate_width(self.batch.chunks, ratio) if num is None else num)

    def chunk_slots(self, pool: Pool, chunk_index: int, num: int) -> torch.Tensor:
        """Global slots of one chunk's indices 0 .. num−1 (shared by the chunk's rows)."""
        def compute() -> torch.Tensor:
            table = self.chunk_tables[pool][chunk_index:chunk_index + 1]
            return paged_slots(table, torch.arange(num, device=self.positions.device)[None, :], self.block_size)[0]
        return self._once(("chunk", pool, chunk_index, num), compute)


def candidate_width(chunks, ratio: int) -> int:
    """The widest chunk's visible entry count at `ratio` (its last row's)."""
    return max(c.end_pos // ratio for c in chunks)


def _to_device(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A host tensor on `device` without a stream sync (a copy from pageable memory would wait for
    the stream; from pinned memory it is queued like a kernel)."""
    return t.pin_memory().to(device, non_blocking=True) if device.type == "cuda" else t


# One forward runs every layer over the same batch and tables: keep the last tables per cache state.
_last_tables: weakref.WeakKeyDictionary[ModelCacheState, ChunkTables] = weakref.WeakKeyDictionary()


def chunk_tables(state: ModelCacheState, batch: ForwardBatch) -> ChunkTables:
    """The batch's `ChunkTables`, built once per forward: reused while the batch, its positions
    and its tables are unchanged (a host comparison of the page lists, no device work). Building
    them first makes every sequence's tables cover its chunk (`ensure_capacity`), so a reuse needs
    no check. With MXSERVE_PREFILL_LAYER_MAPS=1: the per-layer path (capacity, a full host copy of
    the tables for the comparison, and every map per layer)."""
    shared = shared_maps_enabled()
    cached = _last_tables.get(state)
    if shared and cached is not None and cached._shared and cached.still_valid(state, batch):
        return cached
    for chunk in batch.chunks:
        state.ensure_capacity(chunk.seq_id, chunk.end_pos)
    host = ChunkTables.host_tables(state, batch)
    if not shared and cached is not None and not cached._shared and cached.batch is batch and cached.host == host:
        return cached
    tables = ChunkTables(state, batch, host, shared=shared)
    _last_tables[state] = tables
    return tables
