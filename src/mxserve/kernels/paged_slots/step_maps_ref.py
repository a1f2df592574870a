"""Torch twin of a decode step's slot maps, all of them at once (`step_slot_maps_ref`: the spec).

A pure-decode step needs, besides the per-layer top-k entries, a fixed family of integer maps that
depend only on the rows' positions and block tables (`mxserve.model.decode_addresses`):

* the window pool's write slot of each row's token (position p) and its read slots, positions
  p−W+1 .. p;
* per compressor site (a state pool, an entry pool, a ratio m, overlapping windows or not): the
  state slot of p; the entry slot of the entry e = (p+1)//m − 1 that the token completes
  ((p+1) mod m == 0, else −1); e·m, the entry's RoPE position; the state slots of e's receptive
  field, positions e·m − m .. e·m + m − 1 with overlap, e·m .. e·m + m − 1 without;
* per candidate set (an entry pool, a ratio m, a width N): visible = (p+1)//m, the entry ids
  0 .. N−1 with −1 from visible on, and their slots.

Every slot follows the address rule of `paged_slots_ref` (−1 for negative indices, indices past
the table and absent pages). The arithmetic is `mxserve.model.compressor.compressor_addresses`'s,
term for term. The Triton launcher (`step_maps.step_slot_maps_triton`) computes the same integers
in one launch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch

from mxserve.kernels.paged_slots.reference import paged_slots_ref

MAX_SITES = 3  # the kernel's compressor slots (DeepSeek-V4: CSA, its indexer, HCA)
MAX_CANDIDATE_SETS = 2  # the kernel's candidate slots (HCA entries, indexer keys)


@dataclass(frozen=True)
class SiteMapSpec:
    """One compressor's maps: its state rows live in `state_table`'s pool, its entries in `entry_table`'s."""

    state_table: str  # key of the tables mapping
    entry_table: str
    ratio: int  # m
    overlap: bool  # CSA-style windows (receptive field 2m rows) vs HCA (m rows)

    @property
    def num_rows(self) -> int:  # R, the receptive field
        return (2 if self.overlap else 1) * self.ratio


@dataclass(frozen=True)
class CandidateMapSpec:
    """The capacity-wide candidate entries of one entry pool (−1 past each row's visible count)."""

    entry_table: str
    ratio: int
    num: int  # N, the capacity's width


@dataclass(frozen=True)
class StepMapSpec:
    block_size: int  # tokens (entries) per page, every pool's
    window_table: str
    window: int  # W, the sliding window
    sites: tuple[SiteMapSpec, ...] = ()
    candidates: tuple[CandidateMapSpec, ...] = ()

    def __post_init__(self) -> None:
        if self.block_size <= 0 or self.window <= 0:
            raise ValueError(f"StepMapSpec: {self.block_size=} and {self.window=} must be positive")
        if len(self.sites) > MAX_SITES or len(self.candidates) > MAX_CANDIDATE_SETS:
            raise ValueError(f"StepMapSpec: at most {MAX_SITES} sites and {MAX_CANDIDATE_SETS} candidate sets, got "
                             f"{len(self.sites)} and {len(self.candidates)}")
        if any(s.ratio <= 0 for s in self.sites) or any(c.ratio <= 0 or c.num < 0 for c in self.candidates):
            raise ValueError(f"StepMapSpec: ratios must be positive and widths >= 0: {self.sites} {self.candidates}")


@dataclass(frozen=True)
class SiteMaps:
    state_slots: torch.Tensor  # [B] int64 state slot of each row's token
    entry_slots: torch.Tensor  # [B] int64 slot of the entry the token completes, −1 if none
    entry_positions: torch.Tensor  # [B] int64 e·m (negative when e = −1)
    row_slots: torch.Tensor  # [B, R] int64 state slots of e's receptive field


@dataclass(frozen=True)
class CandidateMaps:
    entry_ids: torch.Tensor  # [B, N] int64, −1 from the row's visible count on
    slots: torch.Tensor  # [B, N] int64 their slots (−1 where the id is)
    visible: torch.Tensor  # [B] int64 (p + 1) // m


@dataclass(frozen=True)
class StepMaps:
    window_write: torch.Tensor  # [B] int64
    window_read: torch.Tensor  # [B, W] int64
    sites: tuple[SiteMaps, ...]  # one per spec.sites, in order
    candidates: tuple[CandidateMaps, ...]  # one per spec.candidates, in order


def step_slot_maps_ref(positions: torch.Tensor, tables: Mapping[str, torch.Tensor], spec: StepMapSpec) -> StepMaps:
    """positions [B] int64 (≥ 0), tables name → [B, M] page ids (−1 none) → every map of `spec`."""
    bs = spec.block_size

    def slots(table: str, indices: torch.Tensor) -> torch.Tensor:
        return paged_slots_ref(tables[table], indices, bs)

    offsets = torch.arange(-spec.window + 1, 1, device=positions.device)
    sites = []
    for site in spec.sites:
        m = site.ratio
        completes = (positions + 1).remainder(m) == 0
        entry_ids = torch.div(positions + 1, m, rounding_mode="floor") - 1
        current = entry_ids[:, None] * m + torch.arange(m, device=positions.device)[None, :]
        row_positions = torch.cat((current - m, current), dim=1) if site.overlap else current
        sites.append(SiteMaps(slots(site.state_table, positions),
                              torch.where(completes, slots(site.entry_table, entry_ids), -1),
                              entry_ids * m, slots(site.state_table, row_positions)))
    candidates = []
    for cand in spec.candidates:
        visible = torch.div(positions + 1, cand.ratio, rounding_mode="floor")
        ids = torch.arange(cand.num, device=positions.device)[None, :]
        entry_ids = torch.where(ids < visible[:, None], ids, -1)
        candidates.append(CandidateMaps(entry_ids, slots(cand.entry_table, entry_ids), visible))
    return StepMaps(slots(spec.window_table, positions), slots(spec.window_table, positions[:, None] + offsets[None, :]),
                    tuple(sites), tuple(candidates))
