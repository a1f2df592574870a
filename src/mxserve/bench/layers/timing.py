"""Wall-clock timing of model steps, and a per-op, per-layer breakdown through the KernelSet.

`time_steps` times whole forwards: the device is synchronized before and after each one, so a
step's time includes everything it launches and every host round trip it makes (what a user
waits for). `OpProfiler` wraps every op slot of a `KernelSet` in a timer that synchronizes
before and after the call; it attributes each call to a layer through the identity of the
weights passed to it (ops without weights go to the layer of the previous call) and to the
head. A layer's time runs from its first op to the next layer's first op, so the norms, RoPE,
mHC mixing, cache writes and slot math between ops land in that layer's "other" row. The
profiled step is slower than a plain one (one synchronization per op), so the report scales
layer times to the plain step's total and keeps op times as measured.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import torch

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
    """`profiler.kernels(base)` → a KernelSet whose every op is timed; `records` collects calls."""

    def __init__(self, owners: dict[int, tuple[str, str]], device: torch.device) -> None:
        self.owners = owners
        self.device = device
        self.records: list[tuple[str, str, float, float]] = []  # (owner, op, start_s, end_s)
        self.routed_expert_ids: dict[str, list[torch.Tensor]] = defaultdict(list)  # owner → ids per route call
        self._owner = "preamble"

    def reset(self) -> None:
        self.records.clear()
        self.routed_expert_ids.clear()
        self._owner = "preamble"

    def kernels(self, base: KernelSet) -> KernelSet:
        wrapped = {f.name: self._wrap(f.name, getattr(base, f.name)) for f in dataclasses.fields(base)
                   if f.name != "labels" and callable(getattr(base, f.name))}
        return dataclasses.replace(base, **wrapped)

    def _wrap(self, op: str, fn: Callable) -> Callable:
        def timed(*args: Any, **kwargs: Any) -> Any:
            label = op
            for value in (*args, *kwargs.values()):
                found = self.owners.get(id(value))
                if found is not None:
                    self._owner = found[0]
                    if op in _PER_WEIGHT_OPS:  # "linear wq_b": which projection, not just "a linear"
                        label = f"{op} {found[1]}"
                    break
            synchronize(self.device)
            start = time.perf_counter()
            out = fn(*args, **kwargs)
            synchronize(self.device)
            self.records.append((self._owner, label, start, time.perf_counter()))
            if op == "route" and isinstance(out, tuple) and len(out) == 2:
                self.routed_expert_ids[self._owner].append(out[1].detach())
            return out

        return timed

    def breakdown(self, step_end_s: float) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
        """(owner → span seconds, owner → op → seconds, with "other" = span − ops)."""
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
