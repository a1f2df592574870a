"""The per-chunk attention steps of a varlen batch, run over all its chunks at once.

`attention_heads` used to run, for every sequence chunk of the batch, its own window slot map,
compressor steps and sparse-attention launch: some 10-40 launches per chunk per layer, and a
host-to-device table copy (a stream sync) per slot map. At 64 prompts the default model's prefill
step took 1334 ms against 64 ms for one prompt (H200, session 6 call 3, `benchmarks/batch_split.py`):
the step scaled with the number of sequences, not with the work.

Here each row carries its own sequence's block tables (`ChunkTables`: one table copy per pool per
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
"""

from __future__ import annotations

import os
import weakref

import torch

from mxserve.kernels.paged_slots import paged_slots
from mxserve.model.compressor import CompressorAddresses, CompressorSite, compressor_addresses
from mxserve.model.forward_batch import ForwardBatch
from mxserve.model.kv_state import ModelCacheState, Pool

PER_CHUNK_ENV = "MXSERVE_PER_CHUNK_ATTENTION"


def batched_chunks_enabled() -> bool:
    return os.environ.get(PER_CHUNK_ENV) != "1"


class ChunkTables:
    """Every row's block tables (those of its chunk's sequence) as one device tensor per pool."""

    def __init__(self, state: ModelCacheState, batch: ForwardBatch, host: dict[Pool, list[list[int]]]) -> None:
        device = batch.positions.device
        self.block_size = state.block_size
        self.host = host  # pool → per-chunk page lists (the cache key)
        row_chunk = _to_device(torch.repeat_interleave(torch.arange(len(batch.chunks)),
                                                       torch.tensor([c.num_tokens for c in batch.chunks])), device)
        self.chunk_tables: dict[Pool, torch.Tensor] = {}
        self.row_tables: dict[Pool, torch.Tensor] = {}
        for pool, tables in host.items():
            width = max([1, *(len(t) for t in tables)])  # ≥ 1 column: an empty table maps every index to −1
            padded = torch.tensor([t + [-1] * (width - len(t)) for t in tables], dtype=torch.int64)
            self.chunk_tables[pool] = _to_device(padded, device)
            self.row_tables[pool] = self.chunk_tables[pool].index_select(0, row_chunk)

    @staticmethod
    def host_tables(state: ModelCacheState, batch: ForwardBatch) -> dict[Pool, list[list[int]]]:
        return {pool: [list(state.block_tables[pool].get(c.seq_id, ())) for c in batch.chunks] for pool in Pool}

    def slots(self, pool: Pool, indices: torch.Tensor) -> torch.Tensor:
        """Global slots of per-row indices [T, ...] (row t's positions or entry ids); −1 where none."""
        return paged_slots(self.row_tables[pool], indices, self.block_size)

    def chunk_slots(self, pool: Pool, chunk_index: int, indices: torch.Tensor) -> torch.Tensor:
        """Global slots of one chunk's indices [N] (shared by the chunk's rows)."""
        table = self.chunk_tables[pool][chunk_index:chunk_index + 1]
        return paged_slots(table, indices[None, :], self.block_size)[0]

    def compressor_addresses(self, positions: torch.Tensor, site: CompressorSite) -> CompressorAddresses:
        return compressor_addresses(positions, site.spec, state_slots_of=lambda p: self.slots(site.state_pool, p),
                                    entry_slots_of=lambda s: self.slots(site.entry_pool, s))


def _to_device(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A host tensor on `device` without a stream sync (a copy from pageable memory would wait for
    the stream; from pinned memory it is queued like a kernel)."""
    return t.pin_memory().to(device, non_blocking=True) if device.type == "cuda" else t


# One forward runs every layer over the same batch and tables: keep the last tables per cache state.
_last_tables: weakref.WeakKeyDictionary[ModelCacheState, tuple[ForwardBatch, ChunkTables]] = \
    weakref.WeakKeyDictionary()


def chunk_tables(state: ModelCacheState, batch: ForwardBatch) -> ChunkTables:
    """The batch's `ChunkTables`, built once per forward (reused while the batch and its tables
    are unchanged: a host comparison of the page lists, no device work)."""
    host = ChunkTables.host_tables(state, batch)
    cached = _last_tables.get(state)
    if cached is not None and cached[0] is batch and cached[1].host == host:
        return cached[1]
    tables = ChunkTables(state, batch, host)
    _last_tables[state] = (batch, tables)
    return tables
