"""Wall-clock timing of model steps, and a per-op, per-layer breakdown through the KernelSet.

`time_steps` times whole forwards: the device is synchronized before and after each one, so a
step's time includes everything it launches and every host round trip it makes (what a user
waits for). `OpProfiler` wraps every op slot of a `KernelSet`; it attributes each call to a layer
through the identity of the weights passed to it (ops without weights go to the layer of the
previous call) and to the head. A layer's span runs from its first op to the next layer's first
op, so the norms, RoPE, mHC mixing, cache writes and slot math between ops land in that layer's
"other" row. What the op seconds measure is the split's basis (`op_split.py`):

* wall: each call is timed on the host with the device synchronized before and after it; the
  profiled step is slower than a plain one (one synchronization per op), so the report scales
  layer times to the plain step's total and keeps op times as measured. On a GPU at small batch
  this measures launch overhead and sync latency more than the op.
* device (CUDA): each call runs inside a labelled `torch.profiler` range and gets the device time
  of the kernels it launched; "other" is the kernels launched in the layer's span outside any op
  (`device_ops.py`). If the profile holds no kernels, the split falls back to wall and says so.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import torch

from mxserve.bench.layers.device_ops import (
    PREAMBLE,
    DeviceSplitError,
    OwnerSpans,
    op_range,
    profile_device_split,
)
from mxserve.bench.layers.op_split import OP_SPLIT_WALL, OP_SPLIT_WORDS, OpSplit
from mxserve.kernels.linear import Weight
from mxserve.model.kernel_set import KernelSet


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_steps(step: Callable[[], Any], device: torch.device, *, warmup: int, reps: int) -> list[float]:
    """Seconds per call of `step` over `reps` calls after `warmup` untimed ones."""
    for _ in range(warmup):
        step()
    times = []
    for _ in range(reps):
        synchronize(device)
        start = time.perf_counter()
        step()
        synchronize(device)
        times.append(time.perf_counter() - start)
    return times


def median(values: list[float]) -> float:
    return statistics.median(values)


def weight_owners(model: Any) -> dict[int, tuple[str, str]]:
    """id(weight: tensor, QuantizedWeight or ResidentWeight) → ("layer i" / "head", field path such
    as "wq_b" or "indexer.wq_b"), from the model's bound layers (resident weights are what the
    engine binds for small models on the CPU: the object itself is what the ops receive)."""
    owners: dict[int, tuple[str, str]] = {}

    def visit(obj: Any, owner: str, path: str) -> None:
        if isinstance(obj, Weight):
            owners[id(obj)] = (owner, path)
        elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            owners[id(obj)] = (owner, path)  # ops that take a weight group whole (hc_pre's weights)
            for f in dataclasses.fields(obj):
                if f.name not in ("config", "policy", "kernels", "inv_freq"):
                    visit(getattr(obj, f.name), owner, f"{path}.{f.name}" if path else f.name)
        elif isinstance(obj, tuple | list):
            for item in obj:
                visit(item, owner, path)

    for layer_id, layer in enumerate(model.layers):
        visit(layer, f"layer {layer_id}", "")
    owners[id(model.head)] = ("head", "head")
    for name in ("final_norm", "hc_head_weights"):  # the collapse and norm before the head
        visit(getattr(model, name, None), "head", name)
    return owners


_PER_WEIGHT_OPS = ("linear", "grouped_linear", "expert_ffn")


class OpProfiler:
    """`profiler.kernels(base)` → a KernelSet whose every op is profiled; `profile_step(step)` runs one
    step through it and returns its `OpSplit`. `mode` is "wall" or "device" (`op_split.resolve_op_split`)."""

    def __init__(self, owners: dict[int, tuple[str, str]], device: torch.device, mode: str = "wall") -> None:
        if mode not in OP_SPLIT_WORDS:
            raise ValueError(f"OpProfiler: mode={mode!r} is not one of {list(OP_SPLIT_WORDS)}")
        self.owners = owners
        self.device = device
        self.mode = mode
        # (owner, op, start_s, end_s) per call, host clock; synchronized only in wall timing
        self.records: list[tuple[str, str, float, float]] = []
        self.routed_expert_ids: dict[str, list[torch.Tensor]] = defaultdict(list)  # owner → ids per route call
        self._owner = PREAMBLE
        self._timing = mode  # how the wrappers time the current step (a device fallback runs wall)
        self._spans = OwnerSpans()

    def reset(self) -> None:
        self.records.clear()
        self.routed_expert_ids.clear()
        self._owner = PREAMBLE
        self._spans.close()

    def kernels(self, base: KernelSet) -> KernelSet:
        wrapped = {f.name: self._wrap(f.name, getattr(base, f.name)) for f in dataclasses.fields(base)
                   if f.name != "labels" and callable(getattr(base, f.name))}
        return dataclasses.replace(base, **wrapped)

    def profile_step(self, step: Callable[[], Any]) -> OpSplit:
        """Run `step` once (its model must call the ops of `self.kernels(...)`) and split it. Device
        mode that finds no kernels to split runs the step again with wall timers and says so in
        `notes`: the split is then labelled wall, never zeros passed off as kernel time."""
        self.reset()
        if self.mode == "wall":
            return self._profile_wall(step)
        self._timing = "device"
        try:
            return profile_device_split(step, self._spans, self.device)
        except DeviceSplitError as exc:
            reason = str(exc)
        self.reset()
        self._timing = "wall"
        try:
            split = self._profile_wall(step)
        finally:
            self._timing = self.mode
        return dataclasses.replace(split, notes=(f"no device kernel time to split ({reason}); this split is "
                                                 f"{OP_SPLIT_WALL}", *split.notes))

    def _profile_wall(self, step: Callable[[], Any]) -> OpSplit:
        synchronize(self.device)
        start = time.perf_counter()
        step()
        synchronize(self.device)
        end = time.perf_counter()
        spans, ops = self.breakdown(end)
        preamble = min(s for _, _, s, _ in self.records) - start if self.records else 0.0
        return OpSplit(basis=OP_SPLIT_WALL, spans_s=spans, ops_s=ops, total_s=end - start, preamble_s=preamble)

    def _owner_and_label(self, op: str, args: tuple, kwargs: dict) -> tuple[str, str]:
        label = op
        for value in (*args, *kwargs.values()):
            found = self.owners.get(id(value))
            if found is not None:
                self._owner = found[0]
                if op in _PER_WEIGHT_OPS:  # "linear wq_b": which projection, not just "a linear"
                    label = f"{op} {found[1]}"
                break
        return self._owner, label

    def _wrap(self, op: str, fn: Callable) -> Callable:
        def profiled(*args: Any, **kwargs: Any) -> Any:
            owner, label = self._owner_and_label(op, args, kwargs)
            if self._timing == "device":  # no synchronization: the profiler times the kernels themselves
                self._spans.enter(owner)
                start = time.perf_counter()
                with op_range(owner, label):
                    out = fn(*args, **kwargs)
                end = time.perf_counter()
            else:
                synchronize(self.device)
                start = time.perf_counter()
                out = fn(*args, **kwargs)
                synchronize(self.device)
                end = time.perf_counter()
            self.records.append((owner, label, start, end))
            if op == "route" and isinstance(out, tuple) and len(out) == 2:
                self.routed_expert_ids[owner].append(out[1].detach())
            return out

        return profiled

    def breakdown(self, step_end_s: float) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
        """Wall timing: (owner → span seconds, owner → op → seconds, with "other" = span − ops)."""
        spans: dict[str, float] = {}
        ops: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        starts: dict[str, float] = {}
        for owner, op, start, end in self.records:
            starts.setdefault(owner, start)
            ops[owner][op] += end - start
        order = sorted(starts, key=starts.get)
        for i, owner in enumerate(order):
            stop = starts[order[i + 1]] if i + 1 < len(order) else step_end_s
            spans[owner] = stop - starts[owner]
            ops[owner]["other"] = max(0.0, spans[owner] - sum(v for k, v in ops[owner].items() if k != "other"))
        return spans, {owner: dict(v) for owner, v in ops.items()}
