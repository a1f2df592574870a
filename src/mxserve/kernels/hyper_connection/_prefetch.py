"""Private @triton.jit helper: prefetch global lines into the SM's L1 (`prefetch.global.L1`).

Why: the decode-size hc and RMS-norm programs are latency chains, and the device's Triton (3.6)
issues their later loads only after a long dependent stretch (the mix kernel's rho, the finish
kernel's pre weights) or one step at a time (the mix kernel's 16 K-steps: sm_90 SASS, 48
registers, loads interleaved with the fp64 FMAs that consume them), so every step waited for a
memory round trip. A prefetch issued at the top of the program puts all of those lines in flight
at once; the loads themselves stay where they are and then hit L1. It changes no value.

The interpreter cannot run inline PTX: callers pass ENABLED=False there (and for the old kernels),
which removes the call when the kernel is traced.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def prefetch_l1(ptrs, mask, ENABLED: tl.constexpr):
    """One `prefetch.global.L1` per element of `ptrs` where `mask` holds (give one pointer per
    128-byte line). The asm's dummy result is unused; it is not pure, so it is never removed."""
    if ENABLED:
        tl.inline_asm_elementwise(
            "{ .reg .pred p; setp.ne.b32 p, $2, 0; @p prefetch.global.L1 [$1]; mov.u32 $0, 0; }",
            "=r,l,r", [ptrs, mask.to(tl.int32)], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def prefetch_span_l1(ptr, n, LINES: tl.constexpr):
    """Prefetch elements [0, n) of a contiguous span into L1, LINES lines a step (a run-time loop of
    non-blocking prefetches: one step for any row up to LINES·128 bytes)."""
    STEP: tl.constexpr = 128 // (ptr.dtype.element_ty.primitive_bitwidth // 8)
    for k0 in range(0, n, LINES * STEP):
        k = k0 + tl.arange(0, LINES) * STEP
        prefetch_l1(ptr + k, k < n, True)
