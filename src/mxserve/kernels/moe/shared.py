"""The shared expert through the block-FP8 GEMM family: `expert_ffn_fp8`, the contract of `expert_ffn_ref`.

The three FP8 linears run on `linear_fp8_block` (its `backend`); between them the clamped SwiGLU
and the hidden-dtype rounding, in the reference's order: on CUDA one Triton launch
(`shared_swiglu`, `_shared_swiglu_kernel`) instead of torch's five (two clamps, silu, product,
cast), the same operations in the same order, so the same bits: libdevice without Triton's default
flush-to-zero reflection (`enable_reflect_ftz=False`: CUDA torch keeps subnormals, and Triton's
default would flush a subnormal exp, silu or product to ±0) and no FMA contraction. Not yet
checked on a GPU when written (tests/kernels/moe/test_shared_swiglu.py::test_gpu_bitwise, in
benchmarks/gpu_s6_glue.sh); MXSERVE_TORCH_SHARED_SWIGLU=1 is the off switch (the torch ops).
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from mxserve.formats import QuantizedWeight, WeightLayout
from mxserve.kernels.early_start import early_start_launch
from mxserve.kernels.linear import ResidentWeight
from mxserve.kernels.linear_fp8_block import linear_fp8_block
from mxserve.kernels.moe.reference import ExpertWeights
from mxserve.kernels.triton_switch import interpreting, small_kernel_on


def _fp8(w: object) -> QuantizedWeight:
    if isinstance(w, ResidentWeight) and w.source is not None:
        w = w.source
    if not isinstance(w, QuantizedWeight) or w.layout is not WeightLayout.FP8_BLOCK:
        raise ValueError(f"shared expert: needs FP8 block weights, got {type(w).__name__}")
    return w


def expert_ffn_fp8(
    x: torch.Tensor, w: ExpertWeights, *, limit: float, quantize_inputs: bool, row_scale: torch.Tensor | None = None,
    hidden_dtype: torch.dtype = torch.float32, backend: str = "triton",
) -> torch.Tensor:
    """One SwiGLU expert on rows x [n, D] → fp32 [n, D] with FP8 block weights."""
    g = linear_fp8_block(x, _fp8(w.w1), quantize_input=quantize_inputs, backend=backend)
    u = linear_fp8_block(x, _fp8(w.w3), quantize_input=quantize_inputs, backend=backend)
    if row_scale is None and use_fused_swiglu(g):
        h = shared_swiglu(g, u, limit, hidden_dtype)
    else:
        h = shared_swiglu_torch(g, u, limit, hidden_dtype, row_scale)
    return linear_fp8_block(h, _fp8(w.w2), quantize_input=quantize_inputs, backend=backend)


def shared_swiglu_torch(g: torch.Tensor, u: torch.Tensor, limit: float, hidden_dtype: torch.dtype,
                        row_scale: torch.Tensor | None = None) -> torch.Tensor:
    """The twin: silu(g clamped above at limit) · u clamped to ±limit (· row_scale), in hidden_dtype."""
    h = F.silu(g.clamp(max=limit)) * u.clamp(min=-limit, max=limit)
    if row_scale is not None:
        h = h * row_scale[:, None]
    return h.to(hidden_dtype)


def use_fused_swiglu(g: torch.Tensor) -> bool:
    """The one-launch SwiGLU on CUDA (off: MXSERVE_TORCH_SHARED_SWIGLU=1); on the CPU only under the
    interpreter when a test asks (MXSERVE_TRITON_SHARED_SWIGLU=1)."""
    return small_kernel_on(g, "SHARED_SWIGLU") and (not g.is_cuda or _triton_keeps_subnormals())


@functools.cache
def _triton_keeps_subnormals() -> bool:
    """Whether this Triton takes `enable_reflect_ftz=False` (without it libdevice flushes subnormals
    and the bits could differ from torch's: the torch ops run then, and the GPU test says so)."""
    from triton.backends.nvidia.compiler import CUDAOptions

    return "enable_reflect_ftz" in CUDAOptions.__dataclass_fields__


def shared_swiglu(g: torch.Tensor, u: torch.Tensor, limit: float, hidden_dtype: torch.dtype) -> torch.Tensor:
    """`shared_swiglu_torch` without row scale in one Triton launch: g, u fp32 [n, I] → [n, I] hidden_dtype."""
    import triton

    from mxserve.kernels.moe._shared_swiglu_kernel import _shared_swiglu_kernel

    if g.dtype != torch.float32 or u.dtype != torch.float32 or g.shape != u.shape or g.device != u.device:
        raise ValueError(f"shared_swiglu: g and u must be fp32 of one shape and device, got {g.dtype} "
                         f"{tuple(g.shape)} on {g.device}, {u.dtype} {tuple(u.shape)} on {u.device}")
    if hidden_dtype not in (torch.float32, torch.bfloat16):
        raise ValueError(f"shared_swiglu: hidden_dtype must be fp32 or bf16, got {hidden_dtype}")
    g, u = g.contiguous(), u.contiguous()  # no-ops for the linears' outputs
    h = torch.empty(g.shape, dtype=hidden_dtype, device=g.device)
    if g.numel():
        # --- launch parameters: elementwise, 1024 values a program ---------------------------------
        block = 1024
        interpret = interpreting()
        _shared_swiglu_kernel[(triton.cdiv(g.numel(), block),)](
            g, u, h, g.numel(), float(limit), OUT_BF16=hidden_dtype == torch.bfloat16,
            USE_LIBDEVICE=not interpret, BLOCK=block, **({} if interpret else {"enable_fp_fusion": False, "enable_reflect_ftz": False, **early_start_launch()}),
        )
    return h
