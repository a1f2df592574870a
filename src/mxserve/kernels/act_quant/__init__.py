"""Faithful FP8 activation quantization (power-of-two scale per block of the last dim), fused.

The torch twins are `mxserve.formats.fake_quant_fp8_pow2` and
`mxserve.kernels.linear_fp8_block.quantize_activation_fp8_block`; `triton.py` has the kernels.
`quantize_fp8_block` / `fake_quant_fp8` pick the Triton kernel for CUDA tensors (and under
TRITON_INTERPRET=1) and the twin elsewhere.
"""

from __future__ import annotations

import os

import torch

from mxserve.formats import fake_quant_fp8_pow2
from mxserve.kernels.triton_switch import interpreting


def _use_triton(x: torch.Tensor) -> bool:
    if os.environ.get("MXSERVE_DISABLE_TRITON_ACT_QUANT", "0") == "1":  # the off switch
        return False
    return x.device.type == "cuda" or interpreting()


def quantize_fp8_block(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [M, K] → (codes uint8 [M, K], scales fp32 [M, ceil(K/128)]), bit-identical on every path."""
    if _use_triton(x):
        from mxserve.kernels.act_quant.triton import quantize_fp8_block_triton

        return quantize_fp8_block_triton(x)
    from mxserve.kernels.linear_fp8_block.reference import quantize_activation_fp8_block

    return quantize_activation_fp8_block(x)


def fake_quant_fp8(x: torch.Tensor, block: int = 128) -> torch.Tensor:
    """`fake_quant_fp8_pow2(x, block)`, bit-identical on every path."""
    if _use_triton(x) and block in (32, 64, 128):
        from mxserve.kernels.act_quant.triton import fake_quant_fp8_triton

        return fake_quant_fp8_triton(x, block)
    return fake_quant_fp8_pow2(x, block=block)
