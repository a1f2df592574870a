"""Block-scaled FP8 weights (the release's dense linears): codes [..., out, in] + UE8M0 per block.

`W[i, j] = fp8(codes[i, j]) * 2^(scales[i // bo, j // bi] - 127)` (spec §6.6), default blocks
128x128, edge blocks may be partial. The quantizer picks each block's scale by the power-of-two
ceiling rule, `2^ceil(log2(max(amax, amax_floor) / fmt.max_finite))`, so no value is clipped and
every element is within half an ulp (of the format, at its block's scale) of the input.

amax floor: 1e-4 by default, the reference's `act_quant` floor. It only matters for blocks whose
largest magnitude is below 1e-4: an all-zero block gets scale 2^-22 (byte 105) instead of a
meaningless tiny exponent, and a non-zero block that small is quantized at that coarser scale
(still within the half-ulp bound at the scale actually used, possibly in the subnormal range).
"""

from __future__ import annotations

import torch

from mxserve.formats.blocks import block_amax, block_grid, check_block, expand_blocks
from mxserve.formats.bytes_view import as_uint8_bytes
from mxserve.formats.codec import decode, encode
from mxserve.formats.descriptor import E4M3FN, FloatFormat
from mxserve.formats.pow2 import pow2_ceil_exponent, ue8m0_byte, ue8m0_value

FP8_BLOCK = (128, 128)
FP8_AMAX_FLOOR = 1e-4


def _check_fp8_format(fmt: FloatFormat) -> None:
    if fmt.bits != 8 or fmt.is_integer or not fmt.is_signed:
        raise ValueError(f"block FP8 needs a signed 8-bit float format, got {fmt}")


def quantize_fp8_block(
    w: torch.Tensor,
    fmt: FloatFormat = E4M3FN,
    block: tuple[int, int] = FP8_BLOCK,
    amax_floor: float = FP8_AMAX_FLOOR,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Float [..., out, in] -> (codes uint8 [..., out, in], scales uint8 UE8M0 [..., ceil(out/bo), ceil(in/bi)]).

    Scale bytes are exponent + 127 clamped to [0, 254]. Raises ValueError on non-finite weights.
    """
    _check_fp8_format(fmt)
    block = check_block(block)
    if w.dim() < 2:
        raise ValueError(f"quantize_fp8_block needs [..., out, in], got {tuple(w.shape)=}")
    if not w.is_floating_point():
        raise ValueError(f"quantize_fp8_block needs a float tensor, got {w.dtype=}")
    if w.numel() and not bool(torch.isfinite(w).all()):
        raise ValueError("quantize_fp8_block: weights contain inf or NaN")
    shape = (w.shape[-2], w.shape[-1])
    scale_bytes = ue8m0_byte(pow2_ceil_exponent(block_amax(w, block), fmt.max_finite, amax_floor))
    work = torch.float64 if w.dtype == torch.float64 else torch.float32
    scale = expand_blocks(ue8m0_value(scale_bytes, work), block, shape)
    return encode(w.to(work) / scale, fmt), scale_bytes


def check_fp8_block_shapes(codes: torch.Tensor, scales: torch.Tensor, block: tuple[int, int]) -> None:
    """Raise ValueError unless scales is the block grid of codes ([..., out, in] -> [..., gr, gc])."""
    if codes.dim() < 2:
        raise ValueError(f"FP8 block codes must be [..., out, in], got {tuple(codes.shape)=}")
    grid = block_grid((codes.shape[-2], codes.shape[-1]), block)
    expected = (*codes.shape[:-2], *grid)
    if tuple(scales.shape) != expected:
        raise ValueError(
            f"scales shape {tuple(scales.shape)} does not match codes {tuple(codes.shape)} with "
            f"{block=} (expected {expected})"
        )


def dequantize_fp8_block(
    codes: torch.Tensor,
    scales: torch.Tensor,
    fmt: FloatFormat = E4M3FN,
    block: tuple[int, int] = FP8_BLOCK,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """codes [..., out, in] + UE8M0 scales [..., gr, gc] -> values [..., out, in] in `dtype`.

    Codes and scales may be uint8 or any one-byte dtype (reinterpreted, e.g. float8_e4m3fn /
    float8_e8m0fnu). The product is formed in float32 (exact: an FP8 value times a power of two)
    and then cast to `dtype`. A NaN scale byte (255) gives NaN for its block.
    """
    _check_fp8_format(fmt)
    block = check_block(block)
    codes, scales = as_uint8_bytes(codes), as_uint8_bytes(scales)
    check_fp8_block_shapes(codes, scales, block)
    shape = (codes.shape[-2], codes.shape[-1])
    values = decode(codes, fmt) * expand_blocks(ue8m0_value(scales), block, shape)
    return values.to(dtype)
