"""Rollback of a verify step that ran as decode rows, on the device with fixed shapes.

The graphed speculative step (`step_graphs`) verifies a request's K + 1 positions as K + 1 rows
of one `decode_forward_with_aux` (rows of one sequence at consecutive positions). Every slot such
a row can write is known before the forward from the step's `DecodeAddresses`: the window slot
of its position, each compressor's state row, and the compressed entry / indexer key it emits
when its position completes a window (−1 when it does not). `RowSnapshot.take` reads the stored
bytes of those slots in every layer's caches; `restore(rejected)` writes them back for the rows
whose positions were rejected. Both go through one `SlotRows` per pool (every layer's cache of a
pool shares the layout and the slots, so the address math runs once per pool, not per cache).

No host sync and no data-dependent shape anywhere: both halves are captured in the step's CUDA
graphs. The result is the one `CacheSnapshot` (the eager path's rollback) gives: every cache byte
equals that of a run that never computed the rejected positions.
"""

from __future__ import annotations

import torch

from mxserve.config import AttentionKind
from mxserve.kernels.cache import PagedCache, SlotRows
from mxserve.model.compressor import indexer_compressor_site, kind_compressor_site
from mxserve.model.decode_addresses import DecodeAddresses
from mxserve.model.kv_state import ModelCacheState, Pool


class RowSnapshot:
    def __init__(self, saved: list[tuple[SlotRows, PagedCache, list[torch.Tensor]]]) -> None:
        self._saved = saved

    @classmethod
    def take(cls, state: ModelCacheState, addresses: DecodeAddresses) -> RowSnapshot:
        """The bytes every row of the step at `addresses` is about to overwrite, in every layer.
        One `SlotRows` per pool: every layer's cache of a pool shares the layout and the slots."""
        config = state.config
        slots: dict[Pool, torch.Tensor] = {Pool.WINDOW: addresses.window_write()}
        for kind, state_pool, entry_pool in ((AttentionKind.CSA, Pool.CSA_STATE, Pool.CSA),
                                             (AttentionKind.HCA, Pool.HCA_STATE, Pool.HCA)):
            if kind in config.layer_kinds:
                main = addresses.compressor(kind_compressor_site(config, kind))
                slots[state_pool], slots[entry_pool] = main.state_slots, main.entry_slots
        if AttentionKind.CSA in config.layer_kinds:
            indexer = addresses.compressor(indexer_compressor_site(config))
            slots[Pool.INDEXER_STATE], slots[Pool.INDEXER] = indexer.state_slots, indexer.entry_slots

        rows: dict[Pool, SlotRows] = {}
        saved: list[tuple[SlotRows, PagedCache, list[torch.Tensor]]] = []
        for layer_id, caches in enumerate(state.layers):
            kind = config.attention_kind(layer_id)
            pools = [(Pool.WINDOW, caches.window)]
            if kind is AttentionKind.CSA:
                pools += [(Pool.CSA_STATE, caches.state), (Pool.CSA, caches.compressed),
                          (Pool.INDEXER_STATE, caches.indexer_state), (Pool.INDEXER, caches.indexer)]
            elif kind is AttentionKind.HCA:
                pools += [(Pool.HCA_STATE, caches.state), (Pool.HCA, caches.compressed)]
            for pool, cache in pools:
                if pool not in rows:
                    rows[pool] = SlotRows(cache, slots[pool])
                saved.append((rows[pool], cache, rows[pool].save(cache)))
        return cls(saved)

    def restore(self, rejected: torch.Tensor) -> None:
        """Put back the saved bytes of every row where `rejected` [R] (bool, on the device) is set."""
        for rows, cache, data in self._saved:
            rows.restore(cache, data, rejected)
