"""Private Triton code of the shared expert's SwiGLU; launched only through `shared.py`.

h = silu(min(g, L)) · clamp(u, −L, L), rounded to the hidden dtype, with torch's CUDA operations
one for one: `clamp` (NaN stays NaN: `where`, not `minimum`, which returns the other operand), silu
as x / (1 + exp(−x)) (ATen's CUDA silu: libdevice `expf` — the function CUDA torch's `::expf`
compiles to — and a correctly rounded division), one fp32 product, round to nearest even. The
launcher turns off FMA contraction and libdevice's flush-to-zero (torch's nvcc build keeps
subnormals). The interpreter cannot call libdevice and uses `tl.exp` (numpy).
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton.language.extra import libdevice

from mxserve.kernels.attention_ops._cache_jit import round_bf16
from mxserve.kernels.early_start import wait_for_previous


@triton.jit(do_not_specialize=["numel"])
def _shared_swiglu_kernel(g_ptr, u_ptr, h_ptr, numel, limit, OUT_BF16: tl.constexpr, USE_LIBDEVICE: tl.constexpr,
                          BLOCK: tl.constexpr, PDL: tl.constexpr = False):
    wait_for_previous(PDL)  # before any load or store (kernels/early_start.py)
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    live = offs < numel
    g = tl.load(g_ptr + offs, mask=live, other=0.0)
    u = tl.load(u_ptr + offs, mask=live, other=0.0)
    g = tl.where(g > limit, limit, g)  # g.clamp(max=limit)
    u = tl.where(u < -limit, -limit, tl.where(u > limit, limit, u))  # u.clamp(min=-limit, max=limit)
    if USE_LIBDEVICE:
        e = libdevice.exp(-g)
    else:
        e = tl.exp(-g)
    h = tl.div_rn(g, 1.0 + e) * u
    if OUT_BF16:
        h = round_bf16(h)
    tl.store(h_ptr + offs, h.to(h_ptr.dtype.element_ty), mask=live)
