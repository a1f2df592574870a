"""The decode step's per-row slot map: `paged_slots(tables, indices, block_size)`, and every map of
a step that depends only on positions and tables at once: `step_slot_maps(positions, tables, spec)`.

The torch twins (`paged_slots_ref`, `step_maps_ref.step_slot_maps_ref`) are the spec; on CUDA one
Triton launch computes the same integers (`paged_slots_triton`, `step_maps.step_slot_maps_triton`). MXSERVE_TORCH_PAGED_SLOTS=1 keeps the twin everywhere (the off
switch); MXSERVE_TRITON_PAGED_SLOTS=1 runs the kernel under TRITON_INTERPRET=1 on the CPU (tests).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from mxserve.kernels.paged_slots.reference import paged_slots_ref
from mxserve.kernels.paged_slots.step_maps_ref import StepMaps, StepMapSpec, step_slot_maps_ref
from mxserve.kernels.triton_switch import small_kernel_on


def use_triton(indices: torch.Tensor) -> bool:
    return small_kernel_on(indices, "PAGED_SLOTS")


def paged_slots(tables: torch.Tensor, indices: torch.Tensor, block_size: int) -> torch.Tensor:
    """See `paged_slots_ref`."""
    if use_triton(indices):
        from mxserve.kernels.paged_slots.triton import paged_slots_triton

        return paged_slots_triton(tables, indices, block_size)
    return paged_slots_ref(tables, indices, block_size)


def step_slot_maps(positions: torch.Tensor, tables: Mapping[str, torch.Tensor], spec: StepMapSpec) -> StepMaps:
    """See `step_slot_maps_ref`: one launch where `use_triton` says so (CUDA), else the twin."""
    if use_triton(positions):
        from mxserve.kernels.paged_slots.step_maps import step_slot_maps_triton

        return step_slot_maps_triton(positions, tables, spec)
    return step_slot_maps_ref(positions, tables, spec)


__all__ = ["paged_slots", "paged_slots_ref", "step_slot_maps", "use_triton"]
