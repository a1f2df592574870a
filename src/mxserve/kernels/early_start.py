"""Early start for the small decode kernels: programmatic dependent launch (PDL), waiting first.

Why: a decode step is a chain of short launches (~45 a Flash layer, ~330 for the packaged default
model's step, most of them a few µs), and between two kernels of a replayed CUDA graph the GPU sat
idle ~3.6 µs a launch (session 6's Flash profile, docs/benchmarks.md "Issue 12"). Launched as a
programmatic dependent launch, a kernel is set up and its programs made resident while the kernel
before it still runs; session 7 measured 0.055 ms off the default model's batch-1 step from the RMS
norm and hyper-connection kernels alone.

The pattern here is the simplest safe one. A kernel launched with `early_start_launch()` starts
with `wait_for_previous(PDL)`: it lets the next launch begin (`griddepcontrol.launch_dependents`,
which takes effect once every program of this grid has issued it or exited) and then waits for the
previous kernel on the stream to finish with its writes visible (`griddepcontrol.wait`) before its
first load or store. So every memory access of the kernel happens after its predecessor completed,
exactly as with an ordinary launch: the same values, the same bits. It is transitive: a kernel
completes only after its own wait returned, so waiting for the previous kernel waits for all before
it. Kernels that do useful work before the wait (the FP8 linear's L2 weight prefetch, the hc kernels'
L1 prefetch) have their own, documented variants; this one does nothing before it.

Off: MXSERVE_EARLY_START=0 (read at each launch, so one process can time both), and always under
the interpreter (it cannot run the PTX).
"""

from __future__ import annotations

import os

import triton
import triton.language as tl

EARLY_START_ENV = "MXSERVE_EARLY_START"


def early_start_enabled() -> bool:
    """PDL launches for the kernels that use `wait_for_previous` (on unless MXSERVE_EARLY_START=0)."""
    return os.environ.get("TRITON_INTERPRET", "0") != "1" and os.environ.get(EARLY_START_ENV, "1") != "0"


def early_start_launch() -> dict:
    """The launch keywords of such a kernel: its PDL constexpr and Triton's launch flag, or nothing."""
    return {"PDL": True, "launch_pdl": True} if early_start_enabled() else {}


@triton.jit
def wait_for_previous(PDL: tl.constexpr):
    """First statement of a kernel launched with `early_start_launch()` (module docstring)."""
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()
        tl.extra.cuda.gdc_wait()
