"""Launchers of the fused FP8 activation quantization (one kernel instead of the ~30 small torch
ops of the reference, which dominated the decode time of every W8A8 linear and MoE call).

- `quantize_fp8_block_triton(x)` → (codes, scales): the twin of
  `linear_fp8_block.quantize_activation_fp8_block` (codes uint8 e4m3fn [M, K], scales fp32 2^e
  [M, ceil(K/128)]), the W8A8 GEMMs' input.
- `fake_quant_fp8_triton(x, block)` → values: the twin of `formats.fake_quant_fp8_pow2` along the
  last dim, in x's dtype.
Both are bit-identical to their twins (tested under the interpreter and on the GPU), including
−0, a partial last block, NaN rows and M = 0.
"""

from __future__ import annotations

import os

import torch
import triton

from mxserve.kernels.act_quant._act_quant_kernel import _act_quant_fp8_kernel
from mxserve.kernels.early_start import early_start_launch

_X_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _check(x: torch.Tensor, block: int) -> torch.Tensor:
    if x.dtype not in _X_DTYPES:
        raise ValueError(f"act_quant: x must be one of {_X_DTYPES}, got {x.dtype}")
    if x.dim() == 0:
        raise ValueError("act_quant: x needs at least one dimension")
    if block not in (32, 64, 128):
        raise ValueError(f"act_quant: block must be 32, 64 or 128, got {block}")
    if x.device.type != "cuda" and os.environ.get("TRITON_INTERPRET", "0") != "1":
        raise ValueError(f"act_quant triton backend needs a CUDA tensor or TRITON_INTERPRET=1, got {x.device}")
    x2 = x.reshape(-1, x.shape[-1])
    return x2 if x2.stride(-1) == 1 else x2.contiguous()


def _launch(x2: torch.Tensor, out: torch.Tensor, scales: torch.Tensor, block: int, codes: bool) -> None:
    m, k = x2.shape
    if m == 0 or k == 0:
        return
    rows = 1 if m <= 64 else 16  # decode: one row per program (more programs); prefill: 16-row tiles
    _act_quant_fp8_kernel[(triton.cdiv(m, rows), triton.cdiv(k, block))](
        x2, out, scales, m, k, x2.stride(0), out.stride(0), scales.stride(0),
        BLOCK_K=block, ROWS=rows, CODES=codes, num_warps=4 if rows > 1 else 1, **early_start_launch(),
    )


def quantize_fp8_block_triton(x: torch.Tensor, block: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """x [M, K] float → (e4m3fn codes uint8 [M, K], fp32 scales [M, ceil(K/block)])."""
    if x.dim() != 2:
        raise ValueError(f"quantize_fp8_block: x must be [M, K], got {tuple(x.shape)}")
    x2 = _check(x, block)
    m, k = x2.shape
    codes = torch.empty((m, k), dtype=torch.uint8, device=x.device)
    scales = torch.empty((m, triton.cdiv(k, block)), dtype=torch.float32, device=x.device)
    _launch(x2, codes, scales, block, codes=True)
    return codes, scales


def fake_quant_fp8_triton(x: torch.Tensor, block: int = 128) -> torch.Tensor:
    """Quantize-dequantize x along its last dim (e4m3fn, power-of-two scale per `block`), x's dtype."""
    x2 = _check(x, block)
    out = torch.empty(x2.shape, dtype=x.dtype, device=x.device)
    _launch(x2, out, out, block, codes=False)  # scales unused: any pointer
    return out.view(x.shape)
