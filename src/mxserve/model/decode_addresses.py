"""Every slot map of one decode step that does not depend on a layer's data, computed once
(`StepAddressMaps`, shared with the prefill chunks' `ChunkTables`).

The pools' block tables are per sequence and shared by every layer that has the pool
(`kv_state`), and a decode step's positions are the same for every layer, so the window's write
and read slots, each compressor's state/entry/receptive-field slots, the visible entry counts and
the HCA and indexer candidate slots of the first layer of a kind are those of every later layer.
Computing them per layer was most of the decode step's small launches (the default model: ~500
int64 ops and 52 slot-map launches per token out of ~1000 launches, counted on the CPU). Only the
CSA layers' selected entries (their top-k, data) are mapped per layer, through `entry_slots`.

Each map is computed on first use and kept for the rest of the step: inside a captured CUDA graph
that first use is part of the replay, so the maps follow the step's positions and tables. Where
the slot map runs as a Triton launch (`kernels.paged_slots.use_triton`: CUDA), the first use
computes every map the model's layer kinds need in ONE launch (`step_slot_maps`) instead of ~65
(the int64 ops of `compressor_addresses` per site, a slot map per pool, the candidate and window
offsets); the twin path computes each on its own, as before. Same integers either way
(tests/kernels/paged_slots/test_step_maps.py, tests/model/test_decode_path.py).
"""

from __future__ import annotations

import os

import torch

from mxserve.config import ModelConfig
from mxserve.kernels.paged_slots import use_triton
from mxserve.model.decode_batch import DecodeBatch, DecodeGeometry
from mxserve.model.kv_state import Pool
from mxserve.model.step_maps import StepAddressMaps


class DecodeAddresses(StepAddressMaps):
    """The slot maps of one `DecodeBatch` step (B rows): see the module docstring and
    `StepAddressMaps`. Padding rows have all-(−1) tables, so every slot they get is −1."""

    def __init__(self, batch: DecodeBatch, geometry: DecodeGeometry, config: ModelConfig, *,
                 fused: bool | None = None) -> None:
        """`fused`: compute the maps in one launch on first use (None: where the slot map is a
        Triton launch, `use_triton`, unless MXSERVE_PER_MAP_SLOTS=1, the A/B switch that keeps
        session 5's path: map by map, each slot map one launch); False: map by map."""
        if fused is None:
            fused = use_triton(batch.positions) and os.environ.get("MXSERVE_PER_MAP_SLOTS") != "1"
        super().__init__(config, geometry.block_size, fused=fused)
        self.batch = batch
        self.geometry = geometry

    @property
    def positions(self) -> torch.Tensor:
        return self.batch.positions  # [B] int64

    def tables_by_row(self) -> dict[Pool, torch.Tensor]:
        return self.batch.block_tables

    def candidate_width(self, pool: Pool, ratio: int) -> int:
        """The capacity's fixed widths (`DecodeGeometry`): a captured graph's shapes."""
        return self.geometry.indexer_candidates if pool is Pool.INDEXER else self.geometry.hca_candidates
