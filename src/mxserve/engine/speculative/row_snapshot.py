"""Rollback of a verify step that ran as decode rows, on the device with fixed shapes.

The graphed speculative step (`step_graphs`) verifies a request's K + 1 positions as K + 1 rows
of one `decode_forward_with_aux` (rows of one sequence at consecutive positions). Every slot such
a row can write is known before the forward from the step's `DecodeAddresses`: the window slot
of its position, each compressor's state row, and the compressed entry / indexer key it emits
when its position completes a window (−1 when it does not). `RowSnapshot.take` reads the stored
bytes of those slots in every layer's caches; `restore(rejected)` writes them back for the rows
whose positions were rejected, through `PagedCache.write_bytes` (slot −1: nothing written).

No host sync and no data-dependent shape anywhere: both halves are captured in the step's CUDA
graphs. The result is the one `CacheSnapshot` (the eager path's rollback) gives: every cache byte
equals that of a run that never computed the rejected positions.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mxserve.config import AttentionKind
from mxserve.kernels.cache import PagedCache
from mxserve.model.compressor import indexer_compressor_site, kind_compressor_site
from mxserve.model.decode_addresses import DecodeAddresses
from mxserve.model.kv_state import ModelCacheState


@dataclass(frozen=True)
class _SavedRows:
    cache: PagedCache
    slots: torch.Tensor  # [R] the slot row r writes in this cache, −1 for none
    data: torch.Tensor  # [R, data_bytes] uint8 stored before the forward (zeros where slot −1)
    scales: torch.Tensor  # [R, scale_bytes] uint8


class RowSnapshot:
    def __init__(self, saved: list[_SavedRows]) -> None:
        self._saved = saved

    @classmethod
    def take(cls, state: ModelCacheState, addresses: DecodeAddresses) -> RowSnapshot:
        """The bytes every row of the step at `addresses` is about to overwrite, in every layer."""
        config = state.config
        saved: list[_SavedRows] = []

        def save(cache: PagedCache | None, slots: torch.Tensor) -> None:
            if cache is not None:
                data, scales = cache.read_bytes(slots)
                saved.append(_SavedRows(cache, slots, data, scales))

        window = addresses.window_write()
        for layer_id, caches in enumerate(state.layers):
            save(caches.window, window)
            kind = config.attention_kind(layer_id)
            if kind is AttentionKind.SLIDING:
                continue
            main = addresses.compressor(kind_compressor_site(config, kind))
            save(caches.state, main.state_slots)
            save(caches.compressed, main.entry_slots)
            if kind is AttentionKind.CSA:
                indexer = addresses.compressor(indexer_compressor_site(config))
                save(caches.indexer_state, indexer.state_slots)
                save(caches.indexer, indexer.entry_slots)
        return cls(saved)

    def restore(self, rejected: torch.Tensor) -> None:
        """Put back the saved bytes of every row where `rejected` [R] (bool, on the device) is set."""
        for item in self._saved:
            item.cache.write_bytes(torch.where(rejected, item.slots, -1), item.data, item.scales)
