"""Device time per layer and per op of one step, from `torch.profiler` (the op split's `device` basis).

Why: a synchronizing host timer around an op measures, on a GPU at batch 1, the Python launch
path and two synchronizations, not the op (a one-kernel op reads as the whole round trip), so
the op it blames is the one with the most launches. Here the step runs under `torch.profiler`
(CPU + CUDA activity) and the op profiler labels the host side with two kinds of
`record_function` range:

* an owner span, `mxserve.span|<owner>`, open from the owner's first op to the next owner's first
  op (the wall mode's span; the last one closes when the step returns);
* an op range, `mxserve.op|<owner>|<label>`, around every KernelSet call (labels as in the wall
  mode: "linear wq_b", "route", ...).

The profiler links every kernel, copy and fill to the host event that launched it (the innermost
op or range open on the launching thread) and builds the host events' tree. A device activity
goes to the nearest op range above its launching event → (owner, label); else to the nearest
owner span → (owner, "other": norms, RoPE, mHC, cache writes launched by model code between
ops); else (before the first op) → ("preamble", "other"). Seconds are device execution time
summed over kernels (kernels on side streams that overlap count in full).

Which torch fields are read, and why those: `FunctionEvent.kernels` (the activities linked to that
host event), `cpu_parent`, `id`, `name`, `device_type`, `time_range` exist in every torch 2.x;
`is_user_annotation` is read with a default. A host event's own `kernels` are used, not
`device_time_total` / `self_device_time_total`: those are sums over the tree that some torch
versions inflate (GPU-side annotation spans, host "overhead" records that share an op's id and so
receive its kernels again). Activities are therefore counted once per host event id, from the
widest event carrying that id, and their sum is checked against the flat list of device events;
anything the tree could not place is reported as unattributed, never spread over the layers.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile, record_function, supported_activities

from mxserve.bench.layers.op_split import OP_SPLIT_DEVICE, OpSplit

OP_RANGE_PREFIX = "mxserve.op|"
SPAN_RANGE_PREFIX = "mxserve.span|"
PREAMBLE = "preamble"  # the owner of work before the first op (the embedding), as in the wall mode
OTHER = "other"
# attributed and recorded kernel sums may differ by float rounding only
_SUM_TOLERANCE = 1e-6


class DeviceSplitError(RuntimeError):
    """The profile holds no device time that can be split (no kernels recorded, or none linked)."""


def op_range_name(owner: str, label: str) -> str:
    return f"{OP_RANGE_PREFIX}{owner}|{label}"


def span_range_name(owner: str) -> str:
    return f"{SPAN_RANGE_PREFIX}{owner}"


def is_range_name(name: str) -> bool:
    return name.startswith((OP_RANGE_PREFIX, SPAN_RANGE_PREFIX))


def parse_range(name: str) -> tuple[str, str] | None:
    """(owner, op label) of an op range, (owner, "other") of an owner span, None for any other name."""
    if name.startswith(OP_RANGE_PREFIX):
        owner, _, label = name[len(OP_RANGE_PREFIX):].partition("|")
        return owner, label
    if name.startswith(SPAN_RANGE_PREFIX):
        return name[len(SPAN_RANGE_PREFIX):], OTHER
    return None


@contextlib.contextmanager
def op_range(owner: str, label: str):
    with record_function(op_range_name(owner, label)):
        yield


class OwnerSpans:
    """The open span range of the current owner. `enter(owner)` ends the previous owner's span and
    opens one for `owner` (a no-op when the owner is unchanged); `close()` ends the last one. The
    op profiler calls `enter` before it opens an op range, so on the one host thread op ranges nest
    inside their owner's span and spans never overlap."""

    def __init__(self) -> None:
        self.owner: str | None = None
        self._range: record_function | None = None

    def enter(self, owner: str) -> None:
        if owner == self.owner:
            return
        self.close()
        self._range = record_function(span_range_name(owner))
        self._range.__enter__()
        self.owner = owner

    def close(self) -> None:
        if self._range is not None:
            self._range.__exit__(None, None, None)
        self._range, self.owner = None, None


@dataclass(frozen=True)
class HostEvent:
    """One host-side profiler event (an op range, a span, an aten op, a runtime call)."""

    index: int  # its position in the list given to `split_device_time`; `parent` refers to it
    name: str  # range names carry (owner, op): see `parse_range`
    parent: int | None  # index of the innermost host event enclosing it; None at top level
    device_s: float  # device seconds of the kernels, copies and fills linked to it directly (not its children)


def split_device_time(events: Sequence[HostEvent], *, total_device_s: float, num_kernels: int) -> OpSplit:
    """Attribute each event's `device_s` to (owner, op) through its nearest range ancestor (itself
    included): an op range gives (owner, label), an owner span (owner, "other"), none ("preamble",
    "other"). `total_device_s` is the step's device time from the flat list of device events
    (`num_kernels` of them); what the events do not account for is `unattributed_s`, with a note.

    Raises DeviceSplitError when there is nothing to split: no device activity at all, or none
    linked to a host event."""
    if num_kernels == 0 or total_device_s <= 0:
        raise DeviceSplitError("the profiler recorded no device kernels, copies or fills in the step")
    by_index = {e.index: e for e in events}
    placed: dict[int, tuple[str, str]] = {}

    def place(index: int) -> tuple[str, str]:
        path, at, found = [], index, (PREAMBLE, OTHER)
        while at is not None:
            if at in placed:
                found = placed[at]
                break
            path.append(at)
            event = by_index[at]
            ranged = parse_range(event.name)
            if ranged is not None:
                found = ranged
                break
            at = event.parent
        for i in path:  # every event on the way shares the nearest range found
            placed[i] = found
        return found

    ops: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for event in events:
        if event.device_s > 0:
            owner, op = place(event.index)
            ops[owner][op] += event.device_s
    attributed_s = sum(sum(v.values()) for v in ops.values())
    if attributed_s <= 0:
        raise DeviceSplitError(f"the profiler recorded {num_kernels} device activities "
                               f"({total_device_s * 1e6:.0f} us) but linked none of them to a host event")
    notes = []
    residual_s = total_device_s - attributed_s
    unattributed_s = residual_s if residual_s > _SUM_TOLERANCE * total_device_s else 0.0
    if unattributed_s:
        notes.append(f"{unattributed_s * 1e6:.1f} us ({unattributed_s / total_device_s:.1%}) of the step's "
                     "kernel time was linked to no host event and is in no layer")
    elif residual_s < -_SUM_TOLERANCE * total_device_s:
        notes.append(f"the linked kernel time exceeds the recorded kernel time by {-residual_s * 1e6:.1f} us: "
                     "the profiler linked some kernels twice; the split over-counts by that much")
    spans = {owner: sum(v.values()) for owner, v in ops.items()}
    return OpSplit(basis=OP_SPLIT_DEVICE, spans_s=spans, ops_s={owner: dict(v) for owner, v in ops.items()},
                   total_s=attributed_s, preamble_s=spans.get(PREAMBLE, 0.0), notes=tuple(notes),
                   unattributed_s=unattributed_s, num_kernels=num_kernels)


def _is_annotation(event: Any) -> bool:
    # The GPU-side mirror of a record_function range is a device event, not device work.
    return bool(getattr(event, "is_user_annotation", False)) or is_range_name(event.name)


def _own_kernel_us(event: Any) -> float:
    # A kernel named as its host event is a mirror (annotation span, legacy placeholder), not work.
    return sum(k.duration for k in event.kernels if k.name != event.name and not is_range_name(k.name))


def host_events(function_events: Iterable[Any]) -> tuple[list[HostEvent], float, int]:
    """(host events with their own device seconds, device seconds of all device events, their count)
    from a profile's `FunctionEvent`s (`prof.events()`, tree built). Each host event id's kernels
    count once, on the widest event carrying that id (see the module docstring)."""
    host, device = [], []
    for event in function_events:
        (host if event.device_type == DeviceType.CPU else device).append(event)
    activities = [e for e in device if not _is_annotation(e)]
    total_s = sum(e.time_range.elapsed_us() for e in activities) / 1e6
    position = {id(e): i for i, e in enumerate(host)}
    carrier: dict[int, Any] = {}  # host event id → the widest event of that id with kernels
    for event in host:
        if _own_kernel_us(event) > 0:
            best = carrier.get(event.id)
            if best is None or event.time_range.elapsed_us() > best.time_range.elapsed_us():
                carrier[event.id] = event
    events = [HostEvent(index=i, name=e.name,
                        parent=position.get(id(e.cpu_parent)) if e.cpu_parent is not None else None,
                        device_s=_own_kernel_us(e) / 1e6 if carrier.get(e.id) is e else 0.0)
              for i, e in enumerate(host)]
    return events, total_s, len(activities)


def profile_device_split(step: Callable[[], Any], spans: OwnerSpans, device: torch.device) -> OpSplit:
    """Run `step` once under `torch.profiler` and split its device time (`split_device_time`). The
    caller's op wrappers open the op ranges and call `spans.enter`; the last span closes here.
    Raises DeviceSplitError (with the reason) when the profile has no device time to split."""
    wanted = (ProfilerActivity.CPU, ProfilerActivity.CUDA)
    activities = [a for a in wanted if a in supported_activities()]
    with profile(activities=activities) as prof:
        try:
            step()
        finally:
            spans.close()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    events, total_s, num_kernels = host_events(prof.events())
    try:
        return split_device_time(events, total_device_s=total_s, num_kernels=num_kernels)
    except DeviceSplitError as exc:
        if ProfilerActivity.CUDA not in activities:
            raise DeviceSplitError(f"{exc}: this torch build's profiler has no CUDA activity") from None
        raise DeviceSplitError(f"{exc} (CUPTI blocked, e.g. by driver permissions or another profiler?)") from None
