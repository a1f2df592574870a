"""Exact rollback of the target's caches for rejected draft positions.

A verify forward writes every one of its K + 1 positions into the target's state: window KV,
compressor state rows (CSA/HCA and the indexer's), and, where a position completes a
compression window, a compressed entry and an indexer key. Reads never reach a rejected
position's entries (the next step recomputes those positions before any query can see them),
so correctness would survive without a rollback; but the contract is stronger: a rejected
position leaves NO trace. `CacheSnapshot.take` copies, before the forward, the stored bytes of
every slot that positions [first, end) of one sequence can write; `restore(first_rejected)` puts
back the bytes of every slot written by a position >= first_rejected. Afterwards every cache
byte equals that of a run that never computed the rejected positions (tests/speculative check
the whole buffers against a non-speculative run). The DSpark windows need no rollback: they
are written for committed positions only.

Cost: (K + 1) rows per layer per pool, a copy of a few KB per request per step.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

import torch

from mxserve.config import AttentionKind
from mxserve.kernels.cache import PagedCache
from mxserve.model.kv_state import ModelCacheState, Pool


@dataclass(frozen=True)
class _Saved:
    cache: PagedCache
    slots: torch.Tensor  # [N] valid slots only
    writer_positions: torch.Tensor  # [N] the position whose processing writes the slot
    data: torch.Tensor  # [N, data_bytes] uint8
    scales: torch.Tensor  # [N, scale_bytes] uint8


class CacheSnapshot:
    def __init__(self, saved: list[_Saved]) -> None:
        self._saved = saved

    @classmethod
    def take(cls, state: ModelCacheState, seq: Hashable, first: int, end: int) -> CacheSnapshot:
        """Save what positions [first, end) of sequence `seq` may overwrite (its tables must already
        cover [0, end))."""
        config = state.config
        device = _device_of(state)
        positions = torch.arange(first, end, dtype=torch.int64, device=device)
        saved: list[_Saved] = []

        def save(cache: PagedCache | None, pool: Pool, indices: torch.Tensor, writers: torch.Tensor) -> None:
            if cache is None or indices.numel() == 0:
                return
            slots = state.slots(pool, seq, indices)
            valid = slots >= 0
            slots, writers = slots[valid], writers[valid]
            data, scales = cache.read_bytes(slots)
            saved.append(_Saved(cache, slots, writers, data, scales))

        for layer_id, caches in enumerate(state.layers):
            save(caches.window, Pool.WINDOW, positions, positions)
            kind = config.attention_kind(layer_id)
            if kind is AttentionKind.SLIDING:
                continue
            csa = kind is AttentionKind.CSA
            ratio = config.compress_rate_csa if csa else config.compress_rate_hca
            save(caches.state, Pool.CSA_STATE if csa else Pool.HCA_STATE, positions, positions)
            # entry s is emitted while processing position ratio·s + ratio − 1
            emitting = positions[(positions + 1).remainder(ratio) == 0]
            entries = torch.div(emitting + 1, ratio, rounding_mode="floor") - 1
            save(caches.compressed, Pool.CSA if csa else Pool.HCA, entries, emitting)
            if csa:
                save(caches.indexer_state, Pool.INDEXER_STATE, positions, positions)
                save(caches.indexer, Pool.INDEXER, entries, emitting)
        return cls(saved)

    def restore(self, first_rejected: int) -> int:
        """Put back the bytes of every saved slot written by a position >= first_rejected.
        Returns the number of entries restored."""
        restored = 0
        for item in self._saved:
            rows = (item.writer_positions >= first_rejected).nonzero().squeeze(1)
            if rows.numel() == 0:
                continue
            data_off, scale_off = item.cache.entry_addresses(item.slots[rows])
            _put(item.cache.buffer, data_off, item.data[rows])
            if item.scales.shape[1]:
                _put(item.cache.buffer, scale_off, item.scales[rows])
            restored += int(rows.numel())
        return restored


def _put(buffer: torch.Tensor, offsets: torch.Tensor, rows: torch.Tensor) -> None:
    index = offsets[:, None] + torch.arange(rows.shape[1], device=buffer.device)[None, :]
    buffer[index.reshape(-1)] = rows.reshape(-1)


def _device_of(state: ModelCacheState) -> torch.device:
    return state.layers[0].window.device if state.layers else torch.device("cpu")
