"""Per-expert token sort for the grouped expert GEMMs: `align_ref` (torch twin) and `align_triton`.

The (token, slot) pairs of a routing, pair id p = token·k + slot, are grouped by expert in
ascending expert order, ascending p within an expert, and each expert's run is padded to a
multiple of `block_m` so that every row block of the GEMM belongs to one expert. Sizes are upper
bounds known without a host sync (pairs + min(E, pairs)·(block_m − 1)); blocks past the last
expert are marked −1 and skipped. Padding lanes hold the sentinel `num_pairs`; the GEMMs mask a
lane unless its position is below start + count of its expert (the logical size) AND its pair id
is below `num_pairs` (the global bound) — both, because a lane can be inside one and not the
other (field-notes §4: unmasked padding lanes corrupted routing under load).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton

from mxserve.kernels.moe._align_kernel import _moe_align_kernel
from mxserve.kernels.moe.router import check_device


@dataclass(frozen=True)
class ExpertBlocks:
    sorted_pair_ids: torch.Tensor  # int32 [capacity]; valid up to expert_start[E]; padding = num_pairs
    block_expert: torch.Tensor  # int32 [capacity / block_m]; the expert of each row block, -1 = unused
    expert_start: torch.Tensor  # int32 [E + 1]; padded start of each expert's rows; [E] = padded total
    expert_count: torch.Tensor  # int32 [E]; real pairs routed to each expert
    num_pairs: int  # tokens · top_k
    block_m: int  # rows per block

    @property
    def capacity(self) -> int:
        return self.sorted_pair_ids.shape[0]


def capacity(num_pairs: int, num_experts: int, block_m: int) -> int:
    """Rows the padded sort can need: every hit expert wastes at most block_m − 1 lanes."""
    rows = num_pairs + min(num_experts, num_pairs) * (block_m - 1)
    return triton.cdiv(rows, block_m) * block_m


def _check(expert_ids: torch.Tensor, num_experts: int, block_m: int) -> None:
    if expert_ids.dim() != 2 or expert_ids.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"align: expert_ids must be int [T, k], got {expert_ids.dtype=} {tuple(expert_ids.shape)=}")
    if num_experts < 1 or block_m < 1 or block_m & (block_m - 1):
        raise ValueError(f"align: need num_experts >= 1 and a power-of-two block_m, got {num_experts=} {block_m=}")


def align_ref(expert_ids: torch.Tensor, num_experts: int, block_m: int) -> ExpertBlocks:
    """The torch twin: a stable sort of the flattened ids (pairs of one expert keep ascending order)."""
    _check(expert_ids, num_experts, block_m)
    dev = expert_ids.device
    flat = expert_ids.reshape(-1).long()
    num_pairs = flat.numel()
    cap = capacity(num_pairs, num_experts, block_m)
    counts = torch.bincount(flat, minlength=num_experts)[:num_experts]
    padded = (counts + block_m - 1) // block_m * block_m
    start = torch.zeros(num_experts + 1, dtype=torch.int64, device=dev)
    start[1:] = torch.cumsum(padded, 0)
    order = torch.sort(flat, stable=True).indices
    sorted_ids = torch.full((cap,), num_pairs, dtype=torch.int32, device=dev)
    block_expert = torch.full((cap // block_m,), -1, dtype=torch.int32, device=dev)
    first = torch.cumsum(counts, 0) - counts  # unpadded start of each expert in `order`
    for e in torch.nonzero(counts).flatten().tolist():
        s, c = int(start[e]), int(counts[e])
        sorted_ids[s:s + c] = order[int(first[e]):int(first[e]) + c].int()
        block_expert[s // block_m:(s + int(padded[e])) // block_m] = e
    return ExpertBlocks(sorted_ids, block_expert, start.int(), counts.int(), num_pairs, block_m)


def align_triton(expert_ids: torch.Tensor, num_experts: int, block_m: int) -> ExpertBlocks:
    """The one-launch Triton sort; the same arrays as `align_ref` (slots past expert_start[E] unset)."""
    _check(expert_ids, num_experts, block_m)
    check_device(expert_ids, "align")
    dev = expert_ids.device
    ids = expert_ids.reshape(-1).contiguous()
    num_pairs = ids.numel()
    cap = capacity(num_pairs, num_experts, block_m)
    sorted_ids = torch.empty((cap,), dtype=torch.int32, device=dev)
    block_expert = torch.empty((cap // block_m,), dtype=torch.int32, device=dev)
    start = torch.empty((num_experts + 1,), dtype=torch.int32, device=dev)
    counts = torch.empty((num_experts,), dtype=torch.int32, device=dev)
    # --- launch parameters ---------------------------------------------------------------------
    chunk = 1024
    num_bins = triton.next_power_of_2(num_experts + 1)  # + the dummy bin for masked lanes
    # ------------------------------------------------------------------------------------------
    _moe_align_kernel[(num_experts,)](
        ids, sorted_ids, block_expert, start, counts, num_pairs, num_experts, cap // block_m,
        BLOCK_M=block_m, CHUNK=chunk, NUM_BINS=num_bins,
    )
    return ExpertBlocks(sorted_ids, block_expert, start, counts, num_pairs, block_m)
