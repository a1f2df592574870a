"""hc_pre's post/comb programs on a second CUDA stream (`MXSERVE_HC_SIDE_STREAM=1`, off by default).

Why: post and comb (20 Sinkhorn iterations, a chain of 39 fp64 divisions) are read only by the
`hc_post` after the block, but as programs of the finish launch they kept the block's first
kernel waiting for them. Launched on a side stream they run beside the block (one CTA a token
block; the block's kernels leave room on the SMs); the caller's stream waits for them in
`hc_post_triton`, the one consumer of post and comb in the model.

The fork and the join are stream waits (`wait_stream`), so they are captured into a CUDA graph as
a branch and its join edge (the fork must be joined before the capture ends: every hc_pre of the
model is followed by its hc_post). The tensors the side launch reads or writes are held here until
the join: the caller frees `mixes` right after hc_pre, and the caching allocator would otherwise
hand its memory to the next allocation on the caller's stream while the side launch still reads
it. This is module state (one side stream and one list of held tensors per device) because the
join belongs to a later call; with the switch off nothing here runs.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import torch

ENV = "MXSERVE_HC_SIDE_STREAM"

_side_streams: dict[int, torch.cuda.Stream] = {}
_held: dict[int, list[torch.Tensor]] = {}  # device index -> tensors of side launches not yet joined


def side_stream_enabled(t: torch.Tensor) -> bool:
    """The switch is on (read at every call) and `t` is on a CUDA device."""
    return t.device.type == "cuda" and os.environ.get(ENV, "0") == "1"


@contextlib.contextmanager
def side_stream_fork(device: torch.device, *, keep: tuple[torch.Tensor, ...], on: bool = True) -> Iterator[None]:
    """Launches inside run on the side stream after all work queued so far on the current stream,
    when `on`, `device` is a CUDA device and the switch is on; else on the current stream (a no-op).
    `keep`: the tensors those launches use, held until `join_side_stream`."""
    if not on or device.type != "cuda" or os.environ.get(ENV, "0") != "1":
        yield
        return
    index = device.index if device.index is not None else torch.cuda.current_device()
    side = _side_streams.get(index)
    if side is None:  # created at the first (eager, warm-up) call, not inside a graph capture
        # high priority: its one CTA a token block is dispatched as soon as an SM has room beside
        # the block's kernels, so it is done before hc_post needs it
        side = _side_streams[index] = torch.cuda.Stream(device=index, priority=-1)
    side.wait_stream(torch.cuda.current_stream(index))
    _held.setdefault(index, []).extend(keep)
    with torch.cuda.stream(side):
        yield


def join_side_stream(device: torch.device) -> None:
    """The current stream waits for every side launch on `device` not joined yet; then the held
    tensors are released (their later reuse is ordered after the wait). Cheap when none is pending."""
    if device.type != "cuda" or not _held:
        return
    index = device.index if device.index is not None else torch.cuda.current_device()
    if _held.pop(index, None) is not None:
        torch.cuda.current_stream(index).wait_stream(_side_streams[index])
