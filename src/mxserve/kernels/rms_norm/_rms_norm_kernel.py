"""Private Triton code of the weighted RMS norm; launched only through `triton.py`.

One program per row: pass 1 sums the squares of the fp32 row in fp64 (the twin's
`xf.double().square().mean()`), r = rsqrt(sum / D + eps) in fp64 rounded to fp32; pass 2 writes
(xf * r) * w in fp32, cast to the output dtype — the twin's operations in the twin's order, so
only the fp64 sum's order differs, which changes the fp32 r only when the fp64 value lies within
an fp64 ulp of an fp32 rounding boundary (about 2^-29 per row).

With PDL (a programmatic dependent launch) the program signals that the next launch may start
and waits for the previous launch (which wrote x) to finish before it reads anything: only the
launch's start-up overlaps.
With PREFETCH (not under the interpreter) the program first puts its row and the weight into L1:
the device's Triton (3.6) runs both passes' loops one block at a time, each waiting for its loads,
so a 4096-wide row was ~8 memory round trips in a row; after the prefetch they are L1 hits. It
changes no value.
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton.language.extra import libdevice

from mxserve.kernels.attention_ops._cache_jit import round_bf16
from mxserve.kernels.hyper_connection._prefetch import prefetch_span_l1


@triton.jit(do_not_specialize=["D"])
def _rms_norm_kernel(x_ptr, w_ptr, out_ptr, D, stride_x, stride_o, EPS: tl.constexpr, BLOCK: tl.constexpr,
                     USE_LIBDEVICE: tl.constexpr, OUT_BF16: tl.constexpr, PREFETCH: tl.constexpr = False,
                     PREFETCH_LINES: tl.constexpr = 128, PDL: tl.constexpr = False):
    row = tl.program_id(0).to(tl.int64)
    if PDL:  # the next launch may start now; nothing is read before the previous one is done (the
        tl.extra.cuda.gdc_launch_dependents()  # caller may have just written x, or even the weight)
        tl.extra.cuda.gdc_wait()
    if PREFETCH:  # the row and the weight, one address per 128-byte line
        prefetch_span_l1(x_ptr + row * stride_x, D, PREFETCH_LINES)
        prefetch_span_l1(w_ptr, D, PREFETCH_LINES)
    acc = tl.zeros((BLOCK,), dtype=tl.float64)
    for d0 in range(0, D, BLOCK):
        cols = d0 + tl.arange(0, BLOCK)
        xf = tl.load(x_ptr + row * stride_x + cols, mask=cols < D, other=0.0).to(tl.float32).to(tl.float64)
        acc += xf * xf
    mean = tl.sum(acc, axis=0) / D
    shifted = mean + tl.full([], EPS, tl.float64)
    if USE_LIBDEVICE:
        r = libdevice.rsqrt(shifted).to(tl.float32)
    else:
        r = (1.0 / tl.sqrt(shifted)).to(tl.float32)
    for d0 in range(0, D, BLOCK):
        cols = d0 + tl.arange(0, BLOCK)
        m = cols < D
        xf = tl.load(x_ptr + row * stride_x + cols, mask=m, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=m, other=0.0).to(tl.float32)
        y = (xf * r) * w
        if OUT_BF16:
            y = round_bf16(y)  # to nearest even as torch does; the cast below is then exact (the interpreter's truncates)
        tl.store(out_ptr + row * stride_o + cols, y.to(out_ptr.dtype.element_ty), mask=m)
