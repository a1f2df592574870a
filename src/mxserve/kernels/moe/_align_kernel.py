"""Private Triton code of the per-expert token sort; launched only through `align.py`.

One program per expert, one launch, no host sync. Every program histograms all expert ids (so it
knows every expert's padded size and hence its own start), then writes its own pairs in
ascending pair order (a running cumulative sum gives each pair's rank), the sentinel `num_pairs`
into its padding lanes, and its expert id into its row blocks. Program 0 also writes the starts
and counts and marks the blocks past the last expert with -1. Padding lanes are masked by the
pair count in every load (the ids of lanes past `num_pairs` go to a dummy histogram bin).
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit(do_not_specialize=['num_pairs', 'max_blocks'])  # run-time sizes: one compile for every value
def _moe_align_kernel(
    ids_ptr, sorted_ptr, block_expert_ptr, expert_start_ptr, expert_count_ptr,
    num_pairs, E, max_blocks,
    BLOCK_M: tl.constexpr, CHUNK: tl.constexpr, NUM_BINS: tl.constexpr,
):
    me = tl.program_id(0)
    lanes = tl.arange(0, CHUNK)
    bins = tl.arange(0, NUM_BINS)
    counts = tl.zeros((NUM_BINS,), dtype=tl.int32)
    for p0 in range(0, num_pairs, CHUNK):
        p = p0 + lanes
        ids = tl.load(ids_ptr + p, mask=p < num_pairs, other=E).to(tl.int32)  # E: the dummy bin
        counts += tl.histogram(ids, NUM_BINS)
    counts = tl.where(bins < E, counts, 0)
    padded = (counts + BLOCK_M - 1) // BLOCK_M * BLOCK_M
    ends = tl.cumsum(padded, axis=0)
    starts = ends - padded
    my_start = tl.sum(tl.where(bins == me, starts, 0), axis=0)
    my_count = tl.sum(tl.where(bins == me, counts, 0), axis=0)
    my_padded = tl.sum(tl.where(bins == me, padded, 0), axis=0)

    rank0 = 0
    for p0 in range(0, num_pairs, CHUNK):
        p = p0 + lanes
        ids = tl.load(ids_ptr + p, mask=p < num_pairs, other=E).to(tl.int32)
        mine = (ids == me).to(tl.int32)
        rank = rank0 + tl.cumsum(mine, axis=0) - 1
        tl.store(sorted_ptr + my_start + rank, p.to(tl.int32), mask=mine != 0)
        rank0 += tl.sum(mine, axis=0)
    pad = tl.arange(0, BLOCK_M)
    tl.store(sorted_ptr + my_start + my_count + pad, num_pairs, mask=my_count + pad < my_padded)
    for b0 in range(0, my_padded // BLOCK_M, CHUNK):
        b = b0 + lanes
        tl.store(block_expert_ptr + my_start // BLOCK_M + b, me, mask=b < my_padded // BLOCK_M)

    if me == 0:
        tl.store(expert_start_ptr + bins, starts, mask=bins < E)
        tl.store(expert_count_ptr + bins, counts, mask=bins < E)
        total_blocks = tl.sum(padded, axis=0) // BLOCK_M
        tl.store(expert_start_ptr + E, total_blocks * BLOCK_M)
        for b0 in range(total_blocks, max_blocks, CHUNK):
            b = b0 + lanes
            tl.store(block_expert_ptr + b, -1, mask=b < max_blocks)
