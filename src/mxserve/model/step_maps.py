"""The slot maps one forward shares across its layers: the base of `DecodeAddresses` (a decode
step) and `ChunkTables` (a forward's prefill chunks).

A forward's positions and per-sequence block tables are the same for every layer, so the window's
write and read slots, each compressor site's state/entry/receptive-field slots, the visible entry
counts and the candidate lists of the first layer of a kind are those of every later layer. Each
map is computed on first use and kept (`_once`). Where the slot map is a Triton launch, the first
use instead computes every map the model's layer kinds need in ONE `step_slot_maps` launch (the
twin path computes each on its own; the same integers either way: tests/kernels/paged_slots/
test_step_maps.py, tests/model/test_decode_addresses.py, tests/model/test_prefill_maps.py).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable

import torch

from mxserve.config import AttentionKind, ModelConfig
from mxserve.kernels.paged_slots import paged_slots, step_slot_maps
from mxserve.kernels.paged_slots.step_maps_ref import CandidateMapSpec, SiteMapSpec, StepMapSpec
from mxserve.model.compressor import (
    CompressorAddresses,
    CompressorSite,
    compressor_addresses,
    indexer_compressor_site,
    kind_compressor_site,
)
from mxserve.model.kv_state import Pool


class StepAddressMaps(ABC):
    """Subclasses set `positions` ([R] int64, one per row) and give `tables_by_row` (pool → [R, pages]
    of each row's sequence) and `candidate_width` (the width of a pool's candidate lists)."""

    positions: torch.Tensor

    def __init__(self, config: ModelConfig, block_size: int, *, fused: bool, shared: bool = True) -> None:
        """`fused`: all maps in one launch on first use; `shared`: keep each map (False: every
        accessor call computes afresh, the per-layer path)."""
        self.config = config
        self.block_size = block_size
        self._fused = fused
        self._shared = shared
        self._memo: dict[Hashable, object] = {}

    @abstractmethod
    def tables_by_row(self) -> dict[Pool, torch.Tensor]:
        """pool → [R, pages]: each row's sequence's block table."""

    @abstractmethod
    def candidate_width(self, pool: Pool, ratio: int) -> int:
        """The width of `pool`'s candidate lists at `ratio` in the one-launch maps."""

    # ------------------------------------------------------------------ memo and the one launch
    def _once(self, key: Hashable, compute: Callable[[], object]):
        if not self._shared:
            return compute()
        if self._fused:
            self._fused = False
            self._compute_all()
        if key not in self._memo:  # the twin path, or a map the fused launch does not cover
            self._memo[key] = compute()
        return self._memo[key]

    def _layer_maps(self) -> tuple[list[CompressorSite], list[tuple[Pool, int, int]]]:
        """The compressor sites and the candidate sets (pool, ratio, width) of the model's layer kinds."""
        cfg = self.config
        kinds = set(cfg.layer_kinds)
        sites: list[CompressorSite] = []
        candidates: list[tuple[Pool, int, int]] = []  # (pool, ratio, width) as `candidates` is asked
        if AttentionKind.CSA in kinds:
            sites += [kind_compressor_site(cfg, AttentionKind.CSA), indexer_compressor_site(cfg)]
            candidates.append((Pool.INDEXER, cfg.compress_rate_csa, self.candidate_width(Pool.INDEXER, cfg.compress_rate_csa)))
        if AttentionKind.HCA in kinds:
            sites.append(kind_compressor_site(cfg, AttentionKind.HCA))
            candidates.append((Pool.HCA, cfg.compress_rate_hca, self.candidate_width(Pool.HCA, cfg.compress_rate_hca)))
        return sites, candidates

    def prime(self) -> None:
        """Compute now, on the current stream, every map the layers read (the one launch where it is
        fused), so that none is first computed on a side lane and then read unordered by another
        (`decode_branches`). A no-op for maps already kept; the per-layer path keeps none."""
        if not self._shared:
            return
        sites, candidates = self._layer_maps()
        self.window_write()
        self.window_read()
        for site in sites:
            self.compressor(site)
        for pool, ratio, num in candidates:
            self.visible(ratio)
            self.candidates(pool, ratio, num)

    def _compute_all(self) -> None:
        """Every map of the model's layer kinds in one `step_slot_maps` launch, filed under the keys
        the accessors below use (the window's; per compressor site; per candidate set and ratio)."""
        sites, candidates = self._layer_maps()
        spec = StepMapSpec(
            self.block_size, Pool.WINDOW.value, self.config.sliding_window,
            tuple(SiteMapSpec(s.state_pool.value, s.entry_pool.value, s.spec.ratio, s.spec.overlap) for s in sites),
            tuple(CandidateMapSpec(pool.value, ratio, num) for pool, ratio, num in candidates),
        )
        maps = step_slot_maps(self.positions, {pool.value: t for pool, t in self.tables_by_row().items()}, spec)
        self._memo["window write"] = maps.window_write
        self._memo["window read"] = maps.window_read
        for site, m in zip(sites, maps.sites, strict=True):
            self._memo[("compressor", site)] = CompressorAddresses(m.state_slots, m.entry_slots, m.entry_positions,
                                                                   m.row_slots)
        for (pool, ratio, num), m in zip(candidates, maps.candidates, strict=True):
            self._memo[("visible", ratio)] = m.visible
            self._memo[("candidates", pool, ratio, num)] = (m.entry_ids, m.slots)

    # ------------------------------------------------------------------ the maps
    def slots(self, pool: Pool, indices: torch.Tensor) -> torch.Tensor:
        """Global slots of per-row indices [R, ...] (row r's positions or entry ids); −1 where none.
        Not kept: for data-dependent indices."""
        return paged_slots(self.tables_by_row()[pool], indices, self.block_size)

    def window_write(self) -> torch.Tensor:
        """[R] the window slot of each row's own token."""
        return self._once("window write", lambda: self.slots(Pool.WINDOW, self.positions))

    def window_read(self) -> torch.Tensor:
        """[R, W] the window slots a row attends to: positions p−W+1 .. p (−1 before position 0)."""
        def compute() -> torch.Tensor:
            offsets = torch.arange(-self.config.sliding_window + 1, 1, device=self.positions.device)
            return self.slots(Pool.WINDOW, self.positions[:, None] + offsets[None, :])
        return self._once("window read", compute)

    def compressor(self, site: CompressorSite) -> CompressorAddresses:
        """A compressor's state, entry and receptive-field slots (`compressor_addresses`)."""
        return self._once(("compressor", site), lambda: compressor_addresses(
            self.positions, site.spec, state_slots_of=lambda p: self.slots(site.state_pool, p),
            entry_slots_of=lambda s: self.slots(site.entry_pool, s)))

    def visible(self, ratio: int) -> torch.Tensor:
        """[R] compressed entries a row can see: s < (p + 1) // ratio."""
        return self._once(("visible", ratio), lambda: torch.div(self.positions + 1, ratio, rounding_mode="floor"))

    def candidates(self, pool: Pool, ratio: int, num: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(entry ids, slots) [R, num] of a row's visible entries in `pool`, both −1 in the columns at
        or past the row's visible count."""
        def compute() -> tuple[torch.Tensor, torch.Tensor]:
            ids = torch.arange(num, device=self.positions.device)[None, :]
            entry_ids = torch.where(ids < self.visible(ratio)[:, None], ids, -1)
            return entry_ids, self.slots(pool, entry_ids)
        return self._once(("candidates", pool, ratio, num), compute)
