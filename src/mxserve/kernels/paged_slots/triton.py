"""Launcher of the slot map: one launch instead of the twin's ~13 elementwise torch ops.

A decode step maps ~10 index sets per layer to cache slots (window insert and reads, compressor
state rows and entries, indexer keys, compressed reads); as torch ops that was ~130 tiny
launches per layer, a measurable share of a CUDA-graph decode step on the H200 (session 4
profile, docs/benchmarks.md). Integer arithmetic only, so the result equals the twin exactly.
"""

from __future__ import annotations

import torch
import triton

from mxserve.kernels.early_start import early_start_launch
from mxserve.kernels.paged_slots._paged_slots_kernel import _paged_slots_kernel


def paged_slots_triton(tables: torch.Tensor, indices: torch.Tensor, block_size: int) -> torch.Tensor:
    """See `paged_slots_ref`."""
    if tables.dim() != 2 or tables.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"paged_slots: tables must be int32/int64 [B, M], got {tables.dtype} {tuple(tables.shape)}")
    if indices.dim() == 0 or indices.shape[0] != tables.shape[0] or indices.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"paged_slots: indices must be int [B={tables.shape[0]}, ...], got {indices.dtype} "
                         f"{tuple(indices.shape)}")
    if block_size <= 0:
        raise ValueError(f"paged_slots: {block_size=} must be positive")
    if tables.device != indices.device:
        raise ValueError(f"paged_slots: {tables.device=} but {indices.device=}")
    if tables.shape[1] == 0:
        return torch.full(indices.shape, -1, dtype=torch.int64, device=indices.device)
    flat = indices.contiguous()
    out = torch.empty(indices.shape, dtype=torch.int64, device=indices.device)
    total = flat.numel()
    if total == 0:
        return out
    # --- launch parameters ----------------------------------------------------------------------
    block = 256
    # ----------------------------------------------------------------------------------------------
    _paged_slots_kernel[(triton.cdiv(total, block),)](
        tables, flat, out, tables.shape[0], total // tables.shape[0], tables.shape[1], tables.stride(0),
        block_size, BLOCK=block, **early_start_launch(),
    )
    return out

