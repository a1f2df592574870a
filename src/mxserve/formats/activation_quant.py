"""Activation fake quantization (quantize-dequantize) of the faithful numeric mode, spec §2.

DeepSeek-V4 was trained with its GEMM inputs, KV NoPE channels and indexer vectors passed through
power-of-two block quantization; the faithful mode reproduces that in place. Blocks run along the
last dim (a partial last block is its own block). Per block: amax = max(|x|, floor),
s = 2^ceil(log2(amax / fmt_max)) (float32 ratio, as the reference), q = RNE(clamp(x / s)), result
q * s in x's dtype. The arithmetic is float32 (q * s is exact there, and exact in bf16 too since q
has at most 4 significant bits). No host syncs: NaN in a block propagates NaN through that block.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from mxserve.formats.blocks import cdiv
from mxserve.formats.codec import round_to_format
from mxserve.formats.descriptor import E2M1, E4M3FN, FloatFormat
from mxserve.formats.pow2 import exp2_int, pow2_ceil_exponent

FP8_ACT_AMAX_FLOOR = 1e-4
FP4_ACT_AMAX_FLOOR = 6.0 * 2.0**-126


def fake_quant_pow2(x: torch.Tensor, fmt: FloatFormat, block: int, amax_floor: float) -> torch.Tensor:
    """Quantize-dequantize `x` to `fmt` with one power-of-two scale per `block` of the last dim."""
    if block < 1:
        raise ValueError(f"block must be positive, got {block=}")
    if x.dim() == 0:
        raise ValueError("fake quantization needs at least one dimension")
    n = x.shape[-1]
    num_blocks = cdiv(n, block)
    xf = F.pad(x.to(torch.float32), (0, num_blocks * block - n)).reshape(*x.shape[:-1], num_blocks, block)
    amax = xf.abs().amax(dim=-1, keepdim=True) if xf.numel() else xf.new_zeros((*xf.shape[:-1], 1))
    scale = exp2_int(pow2_ceil_exponent(amax, fmt.max_finite, amax_floor))
    q = round_to_format((xf / scale).clamp(-fmt.max_finite, fmt.max_finite), fmt)
    return (q * scale).reshape(*x.shape[:-1], num_blocks * block)[..., :n].to(x.dtype)


def fake_quant_fp8_pow2(x: torch.Tensor, block: int = 128) -> torch.Tensor:
    """Reference `act_quant`: e4m3fn, blocks of `block` (128 for GEMM inputs, 64 for KV NoPE), floor 1e-4."""
    return fake_quant_pow2(x, E4M3FN, block, FP8_ACT_AMAX_FLOOR)


def fake_quant_e2m1_pow2(x: torch.Tensor, block: int = 32) -> torch.Tensor:
    """Reference `fp4_act_quant` (indexer): e2m1, blocks of 32, amax floor 6 * 2^-126."""
    return fake_quant_pow2(x, E2M1, block, FP4_ACT_AMAX_FLOOR)
