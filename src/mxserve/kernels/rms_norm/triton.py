"""Launcher of the weighted RMS norm: one launch instead of the twin's ~10 torch ops.

The block norms before attention and the MoE, the q low-rank norm and the final norm were ~10
tiny launches each, ~250 per decode token on the default model (session 4 profile,
docs/benchmarks.md). Selected with the "hc" op (the residual-stream glue: mHC mixing and these
norms), off unless forced.
"""

from __future__ import annotations

import os

import torch
import triton

from mxserve.kernels.rms_norm._rms_norm_kernel import _rms_norm_kernel

MAX_DIM = 65536


def _pdl() -> dict:
    """Programmatic dependent launch (the kernel's early start; not under the interpreter, not with
    MXSERVE_HC_OLD_KERNELS=1): the launch and the weight's prefetch overlap the previous kernel."""
    return {"PDL": True, "launch_pdl": True} if _prefetch() else {}


def _prefetch() -> bool:
    """L1 prefetch of the row and weight (inline PTX: not under the interpreter); off with the hc
    kernels' A/B switch MXSERVE_HC_OLD_KERNELS=1 (read at every call)."""
    return (os.environ.get("TRITON_INTERPRET", "0") != "1"
            and os.environ.get("MXSERVE_HC_OLD_KERNELS", "0") != "1")


def rms_norm_triton(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """See `rms_norm` (the twin): x [..., D], weight [D] → x's dtype and shape."""
    if x.dtype not in (torch.float32, torch.bfloat16) or x.dim() == 0:
        raise ValueError(f"rms_norm: x must be a bf16/fp32 tensor [..., D], got {x.dtype} {tuple(x.shape)}")
    dim = x.shape[-1]
    if weight.shape != (dim,):
        raise ValueError(f"rms_norm: weight must be [{dim}], got {tuple(weight.shape)}")
    if not 0 < dim <= MAX_DIM:
        raise ValueError(f"rms_norm: D={dim} outside 1..{MAX_DIM}")
    if x.device != weight.device:
        raise ValueError(f"rms_norm: {x.device=} but {weight.device=}")
    rows = x.reshape(-1, dim)
    rows = rows if rows.stride(-1) == 1 else rows.contiguous()
    out = torch.empty(rows.shape, dtype=x.dtype, device=x.device)
    if rows.shape[0]:
        # --- launch parameters: fixed, never a function of the row count (batch invariance) ------
        block = min(1024, triton.next_power_of_2(dim))
        # ---------------------------------------------------------------------------------------------
        _rms_norm_kernel[(rows.shape[0],)](
            rows, weight.contiguous(), out, dim, rows.stride(0), out.stride(0), EPS=float(eps), BLOCK=block,
            USE_LIBDEVICE=os.environ.get("TRITON_INTERPRET", "0") != "1", OUT_BF16=x.dtype == torch.bfloat16,
            PREFETCH=_prefetch(), num_warps=4, **_pdl(),
        )
    return out.view(x.shape)
