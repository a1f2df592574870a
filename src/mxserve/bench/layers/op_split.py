"""The per-layer, per-op split of one profiled step, and what its seconds measure.

Two bases produce it. `wall`: every KernelSet op is timed on the host with the device
synchronized before and after the call (`timing.OpProfiler`); on the CPU that is the op's cost,
on a GPU at small batch it is mostly launch overhead and synchronization latency (an op of one
short kernel reads as the whole launch-and-sync round trip). `device`: the step runs under `torch.profiler` with every op in a
labelled range, and each op gets the device time of the kernels, copies and fills launched inside
its range (`device_ops.py`). `auto` picks `device` on CUDA and `wall` elsewhere. Every report
carries the basis in words (`OP_SPLIT_WORDS`), so a split is never read as the other kind.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

OP_SPLIT_MODES = ("auto", "device", "wall")
OP_SPLIT_WALL = "host wall time (synchronizing timers)"
OP_SPLIT_DEVICE = "device kernel time (torch.profiler)"
OP_SPLIT_WORDS = {"wall": OP_SPLIT_WALL, "device": OP_SPLIT_DEVICE}


def resolve_op_split(requested: str, device: torch.device) -> str:
    """"wall" or "device" for `requested` in OP_SPLIT_MODES; ValueError for an unknown mode or for
    "device" off CUDA (the profiler sees no kernels there, so there is nothing to split)."""
    if requested not in OP_SPLIT_MODES:
        raise ValueError(f"bench layers: op_split={requested!r} is not one of {list(OP_SPLIT_MODES)}")
    if requested == "auto":
        return "device" if device.type == "cuda" else "wall"
    if requested == "device" and device.type != "cuda":
        raise ValueError(f"bench layers: op_split='device' needs a CUDA device (it splits kernel time), got {device}")
    return requested


@dataclass(frozen=True)
class OpSplit:
    """One profiled step split by owner ("layer i", "head", "preamble") and op, in `basis` seconds."""

    basis: str  # OP_SPLIT_WALL or OP_SPLIT_DEVICE: what every number below measures
    spans_s: dict[str, float]  # owner → seconds of its span (wall: host time first op → next owner; device: its kernels)
    ops_s: dict[str, dict[str, float]]  # owner → op label ("linear wq_b", "other") → seconds; "other" = span outside ops
    total_s: float  # the step in the basis: wall: the profiled step's wall time; device: the kernel seconds attributed
    preamble_s: float  # wall: host time before the first op; device: kernel seconds before the first op's span
    notes: tuple[str, ...] = ()  # what the reader must know (a fallback, kernels left unattributed)
    unattributed_s: float = 0.0  # device: kernel seconds the profiler linked to no host event (not in spans_s)
    num_kernels: int = 0  # device: kernels, copies and fills the profiler recorded in the step
