"""Every slot map of one decode step that does not depend on a layer's data, computed once.

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
from collections.abc import Callable, Hashable

import torch

from mxserve.config import AttentionKind, ModelConfig
from mxserve.kernels.paged_slots import step_slot_maps, use_triton
from mxserve.kernels.paged_slots.step_maps_ref import CandidateMapSpec, SiteMapSpec, StepMapSpec
from mxserve.model.attention import indexer_compressor_site, kind_compressor_site
from mxserve.model.compressor import CompressorAddresses, CompressorSite, compressor_addresses
from mxserve.model.decode_batch import DecodeBatch, DecodeGeometry, paged_slots
from mxserve.model.kv_state import Pool


class DecodeAddresses:
    """The slot maps of one `DecodeBatch` step (B rows): see the module docstring. Padding rows
    have all-(−1) tables, so every slot they get is −1."""

    def __init__(self, batch: DecodeBatch, geometry: DecodeGeometry, config: ModelConfig, *,
                 fused: bool | None = None) -> None:
        """`fused`: compute the maps in one launch on first use (None: where the slot map is a
        Triton launch, `use_triton`, unless MXSERVE_PER_MAP_SLOTS=1, the A/B switch that keeps
        session 5's path: map by map, each slot map one launch); False: map by map."""
        self.batch = batch
        self.geometry = geometry
        self.config = config
        self.sliding_window = config.sliding_window
        self._memo: dict[Hashable, object] = {}
        if fused is None:
            fused = use_triton(batch.positions) and os.environ.get("MXSERVE_PER_MAP_SLOTS") != "1"
        self._fused = fused

    @property
    def positions(self) -> torch.Tensor:
        return self.batch.positions  # [B] int64

    def _once(self, key: Hashable, compute: Callable[[], object]):
        if self._fused:
            self._fused = False
            self._compute_all()
        if key not in self._memo:  # the twin path, or a map the fused launch does not cover
            self._memo[key] = compute()
        return self._memo[key]

    def _compute_all(self) -> None:
        """Every map of the model's layer kinds in one `step_slot_maps` launch, filed under the keys
        the accessors below use (the window's; per compressor site; per candidate set and ratio)."""
        cfg, geometry = self.config, self.geometry
        kinds = set(cfg.layer_kinds)
        sites: list[CompressorSite] = []
        candidates: list[tuple[Pool, int, int]] = []  # (pool, ratio, width) as `candidates` is asked
        if AttentionKind.CSA in kinds:
            sites += [kind_compressor_site(cfg, AttentionKind.CSA), indexer_compressor_site(cfg)]
            candidates.append((Pool.INDEXER, cfg.compress_rate_csa, geometry.indexer_candidates))
        if AttentionKind.HCA in kinds:
            sites.append(kind_compressor_site(cfg, AttentionKind.HCA))
            candidates.append((Pool.HCA, cfg.compress_rate_hca, geometry.hca_candidates))
        spec = StepMapSpec(
            geometry.block_size, Pool.WINDOW.value, self.sliding_window,
            tuple(SiteMapSpec(s.state_pool.value, s.entry_pool.value, s.spec.ratio, s.spec.overlap) for s in sites),
            tuple(CandidateMapSpec(pool.value, ratio, num) for pool, ratio, num in candidates),
        )
        tables = {pool.value: table for pool, table in self.batch.block_tables.items()}
        maps = step_slot_maps(self.positions, tables, spec)
        self._memo["window write"] = maps.window_write
        self._memo["window read"] = maps.window_read
        for site, m in zip(sites, maps.sites, strict=True):
            self._memo[("compressor", site)] = CompressorAddresses(m.state_slots, m.entry_slots, m.entry_positions,
                                                                   m.row_slots)
        for (pool, ratio, num), m in zip(candidates, maps.candidates, strict=True):
            self._memo[("visible", ratio)] = m.visible
            self._memo[("candidates", pool, ratio, num)] = (m.entry_ids, m.slots)

    def slots(self, pool: Pool, indices: torch.Tensor) -> torch.Tensor:
        """Per-row slots of `indices` [B, ...] in `pool` (not kept: for data-dependent indices)."""
        return paged_slots(self.batch.block_tables[pool], indices, self.geometry.block_size)

    def window_write(self) -> torch.Tensor:
        """[B] the window slot of each row's own token."""
        return self._once("window write", lambda: self.slots(Pool.WINDOW, self.positions))

    def window_read(self) -> torch.Tensor:
        """[B, W] the window slots a row attends to: positions p−W+1 .. p (−1 before position 0)."""
        def compute() -> torch.Tensor:
            offsets = torch.arange(-self.sliding_window + 1, 1, device=self.positions.device)
            return self.slots(Pool.WINDOW, self.positions[:, None] + offsets[None, :])
        return self._once("window read", compute)

    def compressor(self, site: CompressorSite) -> CompressorAddresses:
        """A compressor's state, entry and receptive-field slots (`compressor_addresses`)."""
        return self._once(("compressor", site), lambda: compressor_addresses(
            self.positions, site.spec, state_slots_of=lambda p: self.slots(site.state_pool, p),
            entry_slots_of=lambda s: self.slots(site.entry_pool, s)))

    def visible(self, ratio: int) -> torch.Tensor:
        """[B] compressed entries a row can see: s < (p + 1) // ratio."""
        return self._once(("visible", ratio),
                          lambda: torch.div(self.positions + 1, ratio, rounding_mode="floor"))

    def candidates(self, pool: Pool, ratio: int, num_candidates: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(entry ids, slots) [B, num_candidates] of a row's visible entries in `pool`, both −1 in the
        columns at or past the row's visible count (the capacity's fixed width)."""
        def compute() -> tuple[torch.Tensor, torch.Tensor]:
            ids = torch.arange(num_candidates, device=self.positions.device)[None, :]
            entry_ids = torch.where(ids < self.visible(ratio)[:, None], ids, -1)
            return entry_ids, self.slots(pool, entry_ids)
        return self._once(("candidates", pool, ratio, num_candidates), compute)
