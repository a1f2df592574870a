"""Private Triton code of a decode step's fused slot maps; launched only through `step_maps.py`.

One program per (row, job): job 0 the window maps, jobs 1 .. NUM_SITES the compressor sites,
then the candidate sets. Every job writes into one flat int64 buffer at its `base`, in the
layout `step_maps.map_layout` slices (the two must agree; the interpreter test checks every map
against the twin). The arithmetic is `step_maps_ref.step_slot_maps_ref`'s, on int64.
"""

from __future__ import annotations

import triton
import triton.language as tl

from mxserve.kernels.early_start import wait_for_previous
from mxserve.kernels.paged_slots._paged_slots_kernel import paged_slot


@triton.jit
def _store_range(out_ptr, tables_ptr, width, row, first, count, block_size, BLOCK: tl.constexpr):
    """out[row, j] = slot(first + j) for j < count (a [num_rows, count] map, row-major)."""
    for start in range(0, count, BLOCK):
        j = start + tl.arange(0, BLOCK)
        live = j < count
        slot = paged_slot(tables_ptr, row, width, width, first + j, block_size, live)
        tl.store(out_ptr + row.to(tl.int64) * count + j, slot, mask=live)


@triton.jit
def _store_value(out_ptr, row, value, BLOCK: tl.constexpr):
    """out[row] = value (one lane of a block stores it)."""
    lane = tl.arange(0, BLOCK)
    tl.store(out_ptr + row.to(tl.int64) + lane, tl.zeros([BLOCK], dtype=tl.int64) + value, mask=lane < 1)


@triton.jit
def _site_maps(out_ptr, base, num_rows, row, pos, state_ptr, state_width, entry_ptr, entry_width, ratio, num_field,
               block_size, BLOCK: tl.constexpr):
    """State slot of p, slot of the entry e = (p+1)//m − 1 the token completes (else −1), e·m, and the
    state slots of e's receptive field (the R rows ending at e·m + m − 1)."""
    e = (pos + 1) // ratio - 1
    completes = (pos + 1) % ratio == 0
    _store_range(out_ptr + base, state_ptr, state_width, row, pos, 1, block_size, BLOCK)
    _store_range(out_ptr + base + num_rows, entry_ptr, entry_width, row, tl.where(completes, e, -1), 1, block_size,
                 BLOCK)
    _store_value(out_ptr + base + 2 * num_rows, row, e * ratio, BLOCK)
    _store_range(out_ptr + base + 3 * num_rows, state_ptr, state_width, row, e * ratio + ratio - num_field, num_field,
                 block_size, BLOCK)


@triton.jit
def _candidate_maps(out_ptr, base, num_rows, row, pos, entry_ptr, entry_width, ratio, num, block_size,
                    BLOCK: tl.constexpr):
    """visible = (p+1)//m; entry ids j < visible (else −1) for j < N, and their slots."""
    visible = (pos + 1) // ratio
    _store_value(out_ptr + base, row, visible, BLOCK)
    ids_ptr = out_ptr + base + num_rows
    slots_ptr = ids_ptr + num_rows.to(tl.int64) * num
    for start in range(0, num, BLOCK):
        j = start + tl.arange(0, BLOCK)
        live = j < num
        ids = tl.where(j < visible, j.to(tl.int64), -1)
        tl.store(ids_ptr + row.to(tl.int64) * num + j, ids, mask=live)
        slot = paged_slot(entry_ptr, row, entry_width, entry_width, ids, block_size, live)
        tl.store(slots_ptr + row.to(tl.int64) * num + j, slot, mask=live)


@triton.jit(do_not_specialize=["num_rows", "window_width", "window", "window_base",
                               "s0_state_width", "s0_entry_width", "s0_ratio", "s0_rows", "s0_base",
                               "s1_state_width", "s1_entry_width", "s1_ratio", "s1_rows", "s1_base",
                               "s2_state_width", "s2_entry_width", "s2_ratio", "s2_rows", "s2_base",
                               "c0_width", "c0_ratio", "c0_num", "c0_base", "c1_width", "c1_ratio", "c1_num", "c1_base"])
def _step_maps_kernel(
    positions_ptr, out_ptr, num_rows, block_size,
    window_ptr, window_width, window, window_base,
    s0_state_ptr, s0_state_width, s0_entry_ptr, s0_entry_width, s0_ratio, s0_rows, s0_base,
    s1_state_ptr, s1_state_width, s1_entry_ptr, s1_entry_width, s1_ratio, s1_rows, s1_base,
    s2_state_ptr, s2_state_width, s2_entry_ptr, s2_entry_width, s2_ratio, s2_rows, s2_base,
    c0_ptr, c0_width, c0_ratio, c0_num, c0_base,
    c1_ptr, c1_width, c1_ratio, c1_num, c1_base,
    NUM_SITES: tl.constexpr, NUM_CANDIDATES: tl.constexpr, BLOCK: tl.constexpr,
    PDL: tl.constexpr = False,  # early start: kernels/early_start.py
):
    wait_for_previous(PDL)  # before any load or store (kernels/early_start.py)
    row = tl.program_id(0)
    job = tl.program_id(1)  # the constexpr guards drop the branches of absent sites at compile time
    pos = tl.load(positions_ptr + row).to(tl.int64)
    if job == 0:  # window: write slot of p, read slots of p − W + 1 .. p
        _store_range(out_ptr + window_base, window_ptr, window_width, row, pos, 1, block_size, BLOCK)
        _store_range(out_ptr + window_base + num_rows, window_ptr, window_width, row, pos - window + 1, window,
                     block_size, BLOCK)
    if NUM_SITES >= 1:  # noqa: SIM102 (a compile-time guard around a run-time test)
        if job == 1:
            _site_maps(out_ptr, s0_base, num_rows, row, pos, s0_state_ptr, s0_state_width, s0_entry_ptr,
                       s0_entry_width, s0_ratio, s0_rows, block_size, BLOCK)
    if NUM_SITES >= 2:  # noqa: SIM102 (a compile-time guard around a run-time test)
        if job == 2:
            _site_maps(out_ptr, s1_base, num_rows, row, pos, s1_state_ptr, s1_state_width, s1_entry_ptr,
                       s1_entry_width, s1_ratio, s1_rows, block_size, BLOCK)
    if NUM_SITES >= 3:  # noqa: SIM102 (a compile-time guard around a run-time test)
        if job == 3:
            _site_maps(out_ptr, s2_base, num_rows, row, pos, s2_state_ptr, s2_state_width, s2_entry_ptr,
                       s2_entry_width, s2_ratio, s2_rows, block_size, BLOCK)
    if NUM_CANDIDATES >= 1:  # noqa: SIM102 (a compile-time guard around a run-time test)
        if job == NUM_SITES + 1:
            _candidate_maps(out_ptr, c0_base, num_rows, row, pos, c0_ptr, c0_width, c0_ratio, c0_num, block_size,
                            BLOCK)
    if NUM_CANDIDATES >= 2:  # noqa: SIM102 (a compile-time guard around a run-time test)
        if job == NUM_SITES + 2:
            _candidate_maps(out_ptr, c1_base, num_rows, row, pos, c1_ptr, c1_width, c1_ratio, c1_num, block_size,
                            BLOCK)
