"""Private Triton code of the slot maps; launched only through `triton.py` and `step_maps.py`.

`paged_slot` is the address rule (spec §8.1) for Triton code: both kernels here call it, so the
per-call map and the step's fused maps cannot drift apart.
"""

from __future__ import annotations

import triton
import triton.language as tl

from mxserve.kernels.early_start import wait_for_previous


@triton.jit
def paged_slot(tables_ptr, row, stride_t, width, idx, block_size, live):
    """Slots of int64 indices `idx` of row `row`: page · block_size + idx mod block_size, −1 where idx
    is negative, past the table (`width` pages) or on an absent page (−1)."""
    block = tl.where(idx >= 0, idx // block_size, 0)  # floor division: idx >= 0 here
    in_table = (idx >= 0) & (block < width)
    page = tl.load(tables_ptr + row.to(tl.int64) * stride_t + block, mask=live & in_table, other=-1).to(tl.int64)
    return tl.where(in_table & (page >= 0), page * block_size + (idx - block * block_size), -1)


@triton.jit(do_not_specialize=["num_rows", "per_row", "width"])  # run-time sizes: one compile for all
def _paged_slots_kernel(tables_ptr, indices_ptr, out_ptr, num_rows, per_row, width, stride_t, block_size,
                        BLOCK: tl.constexpr, PDL: tl.constexpr = False):
    wait_for_previous(PDL)  # before any load or store (kernels/early_start.py)
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    live = offs < num_rows * per_row
    row = offs // per_row
    idx = tl.load(indices_ptr + offs, mask=live, other=-1).to(tl.int64)
    slot = paged_slot(tables_ptr, row, stride_t, width, idx, block_size, live)
    tl.store(out_ptr + offs, slot, mask=live)
