"""Private Triton code of the INT8 W8A8 linear; launched only through `triton.py`.

acc[BLOCK_N, BLOCK_M] = W[n-tile] · X[m-tile]ᵀ in int32 (int8 tensor cores on a GPU; an
explicit int32 product-sum under the interpreter): exact, so tile shape, split and M cannot change
a bit. Epilogue in the twin's order: fp32(acc) · x_scale[m] · w_scale[n].
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit(do_not_specialize=['M'])  # run-time sizes: one compile for every value
def _linear_int8_kernel(
    x_ptr, xs_ptr, w_ptr, ws_ptr, out_ptr, M, N, K, stride_xm, stride_wn, stride_om,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, DOT: tl.constexpr,
):
    pid_n = tl.program_id(0)
    pid_m = tl.program_id(1)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    n_mask = offs_n < N
    m_mask = offs_m < M
    acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.int32)
    for k0 in range(0, K, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        k_mask = offs_k < K
        w = tl.load(w_ptr + offs_n[:, None] * stride_wn + offs_k[None, :], mask=n_mask[:, None] & k_mask[None, :],
                    other=0)
        x = tl.load(x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :], mask=m_mask[:, None] & k_mask[None, :],
                    other=0)
        if DOT:
            acc = tl.dot(w, tl.trans(x), acc, out_dtype=tl.int32)
        else:
            acc += tl.sum(w.to(tl.int32)[:, None, :] * x.to(tl.int32)[None, :, :], axis=2)
    xs = tl.load(xs_ptr + offs_m, mask=m_mask, other=0.0)
    ws = tl.load(ws_ptr + offs_n, mask=n_mask, other=0.0)
    out = (acc.to(tl.float32) * xs[None, :]) * ws[:, None]
    tl.store(out_ptr + offs_m[None, :] * stride_om + offs_n[:, None], out, mask=n_mask[:, None] & m_mask[None, :])
