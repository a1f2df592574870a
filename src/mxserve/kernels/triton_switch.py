"""When a kernel module launches Triton rather than its torch twin.

`interpreting()`: TRITON_INTERPRET=1, the CPU tests' way to run Triton kernels (kernels then pick
interpreter-sized tiles and skip device-only features).

`small_kernel_on(t, name)`: the rule of the small index/byte kernels that replace a few torch
launches with one (paged slot maps, rollback byte copies): Triton on CUDA unless
MXSERVE_TORCH_<NAME>=1 (their off switch); on the CPU only under the interpreter and with
MXSERVE_TRITON_<NAME>=1, so tests choose when the slow interpreter runs.
"""

from __future__ import annotations

import os

import torch


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def small_kernel_on(t: torch.Tensor, name: str) -> bool:
    if os.environ.get(f"MXSERVE_TORCH_{name}") == "1":
        return False
    if t.is_cuda:
        return not interpreting()
    return interpreting() and os.environ.get(f"MXSERVE_TRITON_{name}") == "1"
