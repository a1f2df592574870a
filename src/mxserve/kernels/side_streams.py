"""Side CUDA streams ("lanes") for the parts of one step that do not depend on what runs beside them.

Why: a decode step is a chain of short launches, most of which leave most of the GPU idle (a
Flash layer's indexer chain, its compressor, the shared expert beside the routed experts).
Launched on a lane, such a part runs beside the work of the caller's stream instead of after it.

A lane is a named CUDA stream per device, made on first use and reused ever after, so that the
eager warm-up steps and the CUDA graph captured after them use the same streams (a lane must
first be used outside a capture: making a stream inside one is not captured).

- `fork(device, lane, keep=...)`: the launches inside run on the lane, after everything queued
  so far on the caller's stream (captured into a graph as a branch). `keep` names the tensors
  made on the caller's stream that the lane reads or writes: they are held until the join,
  because the caching allocator would otherwise hand their memory to the caller's next
  allocation while the lane still uses it. (Tensors the lane allocates belong to the lane's
  stream; a later fork waits for the caller's queued work first, so their reuse is ordered.)
- `join(device, lane)`: the caller's stream waits for the lane; the held tensors are released.
  Every fork must be joined before a graph capture ends.

Scratch that a launcher keeps between launches (the split-K arrival counters of the linears) must
not be shared by two launches that may run at once: `current_lane(device)` says which lane the
current stream is ("main" for any other stream), so such scratch is kept per lane.

Off the GPU every call here is a no-op: the launches run in program order on the one stream.
This is module state (one set of streams and held tensors per device) because a join belongs to a
later call than its fork.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

MAIN = "main"  # the lane of every stream that is not a side lane

_streams: dict[tuple[int, str], torch.cuda.Stream] = {}
_lane_of_handle: dict[int, str] = {}  # raw cudaStream_t of each side lane -> its name
_held: dict[tuple[int, str], list[torch.Tensor]] = {}  # forks not joined yet -> tensors they use


def _index(device: torch.device) -> int:
    return device.index if device.index is not None else torch.cuda.current_device()


def lane_stream(device: torch.device, lane: str, *, priority: int = 0) -> torch.cuda.Stream:
    """The side stream of `lane` on a CUDA `device`, made on first use with `priority` (-1: its
    programs are dispatched before those of normal-priority streams when an SM has room)."""
    if lane == MAIN:
        raise ValueError(f"lane_stream: {MAIN!r} is the caller's stream, not a side lane")
    key = (_index(device), lane)
    stream = _streams.get(key)
    if stream is None:
        if torch.cuda.is_current_stream_capturing():
            raise RuntimeError(f"lane {lane!r} first used inside a CUDA graph capture: run one eager step first")
        stream = _streams[key] = torch.cuda.Stream(device=key[0], priority=priority)
        _lane_of_handle[stream.cuda_stream] = lane
    return stream


@contextlib.contextmanager
def fork(device: torch.device, lane: str, *, keep: tuple[torch.Tensor | None, ...] = (), on: bool = True,
         priority: int = 0) -> Iterator[None]:
    """Launches inside run on `lane` after the work queued so far on the current stream (module
    docstring); a no-op unless `on` and `device` is a CUDA device. Join it with `join`."""
    if not on or device.type != "cuda":
        yield
        return
    side = lane_stream(device, lane, priority=priority)
    side.wait_stream(torch.cuda.current_stream(device))
    _held.setdefault((_index(device), lane), []).extend(t for t in keep if t is not None)
    with torch.cuda.stream(side):
        yield


def join(device: torch.device, lane: str) -> None:
    """The current stream waits for every launch forked onto `lane` and not joined yet; the tensors
    held for them are released. Cheap (a dict lookup) when nothing is pending there."""
    if device.type != "cuda" or not _held:
        return
    key = (_index(device), lane)
    if _held.pop(key, None) is not None:
        torch.cuda.current_stream(device).wait_stream(_streams[key])


def pending(device: torch.device | None = None) -> list[str]:
    """The lanes with forks not joined yet (on `device`, or on any): tests, and a check that a
    step left nothing running beside it."""
    return sorted(lane for (index, lane) in _held if device is None or index == _index(device))


def current_lane(device: torch.device) -> str:
    """The lane the current stream of `device` is (MAIN off the GPU, and for every stream that is
    not a side lane: the default stream, a warm-up stream, a graph's capture stream)."""
    if device.type != "cuda" or not _lane_of_handle:
        return MAIN
    return _lane_of_handle.get(torch.cuda.current_stream(device).cuda_stream, MAIN)
