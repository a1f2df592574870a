"""hc_pre's post/comb programs on a side stream (`MXSERVE_HC_SIDE_STREAM=1`, off by default).

Why: post and comb (20 Sinkhorn iterations, a chain of 39 fp64 divisions) are read only by the
`hc_post` after the block, but as programs of the finish launch they kept the block's first
kernel waiting for them. Launched on a side lane (`kernels/side_streams.py`) they run beside the
block (one CTA a token block; the block's kernels leave room on the SMs); the caller's stream
waits for them in `hc_post_triton`, the one consumer of post and comb in the model. Every hc_pre
of the model is followed by its hc_post, so every fork is joined before a graph capture ends.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import torch

from mxserve.kernels import side_streams

ENV = "MXSERVE_HC_SIDE_STREAM"
LANE = "hc"
# high priority: its one CTA a token block is dispatched as soon as an SM has room beside the
# block's kernels, so it is done before hc_post needs it
_PRIORITY = -1


def side_stream_enabled(t: torch.Tensor) -> bool:
    """The switch is on (read at every call) and `t` is on a CUDA device."""
    return t.device.type == "cuda" and os.environ.get(ENV, "0") == "1"


@contextlib.contextmanager
def side_stream_fork(device: torch.device, *, keep: tuple[torch.Tensor, ...], on: bool = True) -> Iterator[None]:
    """Launches inside run on the hc lane after all work queued so far on the current stream, when
    `on`, `device` is a CUDA device and the switch is on; else on the current stream (a no-op).
    `keep`: the tensors those launches use, held until `join_side_stream`."""
    with side_streams.fork(device, LANE, keep=keep, on=on and os.environ.get(ENV, "0") == "1", priority=_PRIORITY):
        yield


def join_side_stream(device: torch.device) -> None:
    """The current stream waits for the hc lane's launches not joined yet (cheap when none is pending)."""
    side_streams.join(device, LANE)
