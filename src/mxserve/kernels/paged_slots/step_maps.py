"""A decode step's slot maps in one launch: `step_slot_maps_triton(positions, tables, spec)`.

The spec is `step_maps_ref.step_slot_maps_ref`. The twin is ~45 int64 elementwise ops and one
slot map per pool; as separate launches that was ~65 small kernels per decode step on every model
with CSA and HCA layers, each ~2-5 us in a CUDA-graph replay. Integer arithmetic only, so the
launch gives the twin's integers exactly (interpreter test: every map, rows at 0, at compression
boundaries and in padding). `mxserve.kernels.paged_slots.step_slot_maps` dispatches as
`paged_slots` does (its off switch MXSERVE_TORCH_PAGED_SLOTS=1 keeps the twin here too).

Layout: every map is a contiguous [B, ...] view of one flat int64 buffer (`map_layout`), so the
whole family is one allocation and one launch; the kernel writes at the same offsets.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from mxserve.kernels.early_start import early_start_launch
from mxserve.kernels.paged_slots._step_maps_kernel import _step_maps_kernel
from mxserve.kernels.paged_slots.step_maps_ref import (
    CandidateMaps,
    SiteMaps,
    StepMaps,
    StepMapSpec,
)


def map_layout(spec: StepMapSpec, num_rows: int) -> tuple[int, list[int], list[int], list[int]]:
    """(total int64 elements, window base, site bases, candidate bases) of the flat buffer.
    Window: write [B], read [B, W]. Site: state [B], entry [B], entry position [B], rows [B, R].
    Candidates: visible [B], ids [B, N], slots [B, N]. The kernel derives the inner offsets the same way."""
    b = num_rows
    offset = 0
    window_base, offset = offset, offset + b + b * spec.window
    site_bases = []
    for site in spec.sites:
        site_bases.append(offset)
        offset += 3 * b + b * site.num_rows
    cand_bases = []
    for cand in spec.candidates:
        cand_bases.append(offset)
        offset += b + 2 * b * cand.num
    return offset, [window_base], site_bases, cand_bases


def _views(flat: torch.Tensor, spec: StepMapSpec, num_rows: int) -> StepMaps:
    _, (window_base,), site_bases, cand_bases = map_layout(spec, num_rows)
    b = num_rows

    def take(start: int, *shape: int) -> torch.Tensor:
        n = 1
        for s in shape:
            n *= s
        return flat[start : start + n].view(shape)

    sites = tuple(SiteMaps(take(base, b), take(base + b, b), take(base + 2 * b, b), take(base + 3 * b, b, site.num_rows))
                  for site, base in zip(spec.sites, site_bases, strict=True))
    cands = tuple(CandidateMaps(take(base + b, b, c.num), take(base + b + b * c.num, b, c.num), take(base, b))
                  for c, base in zip(spec.candidates, cand_bases, strict=True))
    return StepMaps(take(window_base, b), take(window_base + b, b, spec.window), sites, cands)


def step_slot_maps_triton(positions: torch.Tensor, tables: Mapping[str, torch.Tensor], spec: StepMapSpec) -> StepMaps:
    """See `step_slot_maps_ref`. One launch; no host read of device values (CUDA-graph safe)."""
    if positions.dim() != 1 or positions.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"step_slot_maps: positions must be int [B], got {positions.dtype} {tuple(positions.shape)}")
    num_rows = positions.shape[0]
    names = {spec.window_table, *(s.state_table for s in spec.sites), *(s.entry_table for s in spec.sites),
             *(c.entry_table for c in spec.candidates)}
    for name in sorted(names):
        t = tables.get(name)
        if t is None or t.dim() != 2 or t.shape[0] != num_rows or t.dtype not in (torch.int32, torch.int64):
            raise ValueError(f"step_slot_maps: table {name!r} must be int [B={num_rows}, M], got "
                             f"{None if t is None else (t.dtype, tuple(t.shape))}")
        if t.device != positions.device:
            raise ValueError(f"step_slot_maps: table {name!r} on {t.device}, positions on {positions.device}")
    total, (window_base,), site_bases, cand_bases = map_layout(spec, num_rows)
    flat = torch.empty(total, dtype=torch.int64, device=positions.device)
    maps = _views(flat, spec, num_rows)
    if num_rows == 0:
        return maps
    ready = {name: tables[name].contiguous() for name in names}  # rows of `width` pages (no-ops here)

    def table(name: str) -> tuple[torch.Tensor, int]:
        return ready[name], ready[name].shape[1]

    site_args: list = []
    for i in range(3):
        if i < len(spec.sites):
            s = spec.sites[i]
            site_args += [*table(s.state_table), *table(s.entry_table), s.ratio, s.num_rows, site_bases[i]]
        else:  # an absent site: never read (its branch is compiled out)
            site_args += [positions, 1, positions, 1, 1, 1, 0]
    cand_args: list = []
    for i in range(2):
        if i < len(spec.candidates):
            c = spec.candidates[i]
            cand_args += [*table(c.entry_table), c.ratio, c.num, cand_bases[i]]
        else:
            cand_args += [positions, 1, 1, 0, 0]
    # --- launch parameters ----------------------------------------------------------------------
    block = 128  # lanes per step of a row's map (the window, a receptive field, a candidate set)
    # ----------------------------------------------------------------------------------------------
    grid = (num_rows, 1 + len(spec.sites) + len(spec.candidates))
    _step_maps_kernel[grid](
        positions, flat, num_rows, spec.block_size, *table(spec.window_table), spec.window, window_base,
        *site_args, *cand_args, NUM_SITES=len(spec.sites), NUM_CANDIDATES=len(spec.candidates), BLOCK=block,
        **early_start_launch(),
    )
    return maps

