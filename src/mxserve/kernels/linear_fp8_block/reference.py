"""Torch twin of the block-scaled FP8 linear (the spec the Triton kernel is tested against).

`linear_fp8_block_ref` is the existing linear reference restricted to what the kernel accepts
(an FP8_BLOCK `QuantizedWeight` with 128x128 blocks): fp64 accumulation rounded once to fp32.
`quantize_activation_fp8_block` is the W8A8 activation side in the form the tensor-core path
consumes: e4m3fn codes plus one power-of-two fp32 scale per (row, 128 channels), chosen by the
same rule as `fake_quant_fp8_pow2`, so `decode(codes) * scale` equals the faithful fake
quantization bit for bit (tested).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from mxserve.formats import (
    E4M3FN,
    E4M3FNUZ,
    FP8_AMAX_FLOOR,
    QuantizedWeight,
    WeightLayout,
    exp2_int,
    fake_quant_fp8_pow2,
    pow2_ceil_exponent,
)
from mxserve.kernels.linear.reference import linear_ref

BLOCK_K = 128  # the checkpoint's scale block along K and N; the kernels assume it
SUPPORTED_FORMATS = (E4M3FN, E4M3FNUZ)


def check_fp8_block_weight(weight: object) -> QuantizedWeight:
    """The weight as a 2-D FP8_BLOCK QuantizedWeight with 128x128 blocks, else ValueError/TypeError."""
    if not isinstance(weight, QuantizedWeight):
        raise TypeError(f"linear_fp8_block needs a QuantizedWeight, got {type(weight).__name__}")
    if weight.layout is not WeightLayout.FP8_BLOCK:
        raise ValueError(f"linear_fp8_block needs layout FP8_BLOCK, got {weight.layout=}")
    if tuple(weight.block) != (BLOCK_K, BLOCK_K):
        raise ValueError(f"linear_fp8_block needs 128x128 scale blocks, got {weight.block=}")
    if weight.fmt not in SUPPORTED_FORMATS:
        raise ValueError(f"linear_fp8_block supports e4m3fn and e4m3fnuz codes, got {weight.fmt.name=}")
    if len(weight.shape) != 2:
        raise ValueError(f"linear_fp8_block needs a 2-D weight [out, in], got {weight.shape=}")
    return weight


def linear_fp8_block_ref(x: torch.Tensor, weight: QuantizedWeight, *, quantize_input: bool = False,
                         out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """x [..., K] (any float dtype) · W[N, K]ᵀ → fp32 [..., N], W = fp8(codes) · 2^(scale-127) per block.

    `quantize_input` first fake-quantizes x to e4m3fn per token per 128 channels (W8A8).
    `out_dtype` (None: fp32): the fp32 result rounded once by `.to(out_dtype)`.
    """
    return linear_ref(x, check_fp8_block_weight(weight), quantize_input=quantize_input, out_dtype=out_dtype)


def quantize_activation_fp8_block(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [M, K] → (codes uint8 e4m3fn [M, K], scales fp32 [M, ceil(K/128)]) with
    decode(codes) * scale == fake_quant_fp8_pow2(x) exactly (a partial last block is its own block)."""
    if x.dim() != 2:
        raise ValueError(f"quantize_activation_fp8_block needs x [M, K], got {tuple(x.shape)=}")
    num_rows, k = x.shape
    num_blocks = -(-k // BLOCK_K)
    xq = fake_quant_fp8_pow2(x.float(), block=BLOCK_K)  # the faithful values, fp32
    padded = F.pad(x.float(), (0, num_blocks * BLOCK_K - k)).reshape(num_rows, num_blocks, BLOCK_K)
    amax = padded.abs().amax(dim=-1) if padded.numel() else padded.new_zeros((num_rows, num_blocks))
    scales = exp2_int(pow2_ceil_exponent(amax, E4M3FN.max_finite, FP8_AMAX_FLOOR))
    # xq / scale is an e4m3fn value exactly (scale is the power of two xq was rounded at), so
    # torch's cast only reinterprets it; it is much cheaper than the general encoder on a GPU
    per_elem = scales.repeat_interleave(BLOCK_K, dim=1)[:, :k]
    codes = (xq / per_elem).to(torch.float8_e4m3fn).view(torch.uint8)
    return codes, scales
