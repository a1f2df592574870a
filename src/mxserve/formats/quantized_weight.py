"""`QuantizedWeight`: a quantized linear weight as one object, its physical layout travelling with it.

The release stores dense linears as block FP8 (e4m3fn codes [out, in] + UE8M0 per 128x128) and
routed experts as MXFP4 (packed e2m1 [out, ceil(in/2)] + UE8M0 per 1x32). Kernels read format,
block and logical shape from here and never infer them from tensor shapes (an odd `in` makes the
packed shape ambiguous). Codes and scales are always uint8 bytes; checkpoint dtypes are
reinterpreted with `.view(torch.uint8)`, never cast. Leading batch dims (stacked experts) are
allowed: `shape` is (..., out, in).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import torch

from mxserve.formats.block_fp8 import (
    FP8_BLOCK,
    check_fp8_block_shapes,
    dequantize_fp8_block,
    quantize_fp8_block,
)
from mxserve.formats.bytes_view import as_uint8_bytes
from mxserve.formats.descriptor import E2M1, E4M3FN, FloatFormat
from mxserve.formats.mxfp4 import MXFP4_BLOCK, check_mxfp4_shapes, dequantize_mxfp4, quantize_mxfp4


class WeightLayout(StrEnum):
    FP8_BLOCK = "fp8_block"  # codes [..., out, in], one UE8M0 per block (default 128x128)
    MXFP4 = "mxfp4"  # packed e2m1 [..., out, ceil(in/2)], one UE8M0 per 1x32


@dataclass(frozen=True, eq=False)
class QuantizedWeight:
    """Codes + scales + format + block + logical shape + layout of one quantized weight."""

    codes: torch.Tensor  # uint8; FP8_BLOCK: [..., out, in] codes; MXFP4: [..., out, ceil(in/2)] packed
    scales: torch.Tensor  # uint8 UE8M0 bytes [..., ceil(out/block[0]), ceil(in/block[1])]
    fmt: FloatFormat  # code format: an 8-bit float for FP8_BLOCK, E2M1 for MXFP4
    block: tuple[int, int]  # elements per scale (rows, cols): (128, 128) or (1, 32)
    shape: tuple[int, ...]  # logical (..., out, in)
    layout: WeightLayout

    def __post_init__(self) -> None:
        if self.codes.dtype != torch.uint8 or self.scales.dtype != torch.uint8:
            raise ValueError(
                f"codes and scales must be uint8 bytes (use as_uint8_bytes), got {self.codes.dtype=} {self.scales.dtype=}"
            )
        if self.codes.device != self.scales.device:
            raise ValueError(
                f"codes and scales on different devices: {self.codes.device=} {self.scales.device=}"
            )
        if len(self.shape) < 2:
            raise ValueError(f"logical shape must be (..., out, in), got {self.shape=}")
        if self.layout is WeightLayout.FP8_BLOCK:
            if self.fmt.bits != 8 or self.fmt.is_integer or not self.fmt.is_signed:
                raise ValueError(f"FP8_BLOCK needs a signed 8-bit float format, got {self.fmt=}")
            if tuple(self.codes.shape) != tuple(self.shape):
                raise ValueError(f"FP8_BLOCK codes shape {tuple(self.codes.shape)} != logical {self.shape=}")
            check_fp8_block_shapes(self.codes, self.scales, self.block)
        elif self.layout is WeightLayout.MXFP4:
            if self.fmt != E2M1 or tuple(self.block) != MXFP4_BLOCK:
                raise ValueError(
                    f"MXFP4 needs fmt=e2m1 and block={MXFP4_BLOCK}, got {self.fmt=} {self.block=}"
                )
            if tuple(self.codes.shape[:-1]) != tuple(self.shape[:-1]):
                raise ValueError(
                    f"MXFP4 packed shape {tuple(self.codes.shape)} does not fit logical {self.shape=}"
                )
            check_mxfp4_shapes(self.codes, self.scales, self.shape[-1])
        else:
            raise ValueError(f"unknown {self.layout=}")

    # --- constructors -------------------------------------------------------------------------

    @classmethod
    def from_fp8_block(
        cls,
        codes: torch.Tensor,
        scales: torch.Tensor,
        block: tuple[int, int] = FP8_BLOCK,
        fmt: FloatFormat = E4M3FN,
    ) -> QuantizedWeight:
        """From stored FP8 codes (uint8 or float8_*) and UE8M0 scales (uint8 or float8_e8m0fnu)."""
        codes = as_uint8_bytes(codes)
        return cls(
            codes, as_uint8_bytes(scales), fmt, tuple(block), tuple(codes.shape), WeightLayout.FP8_BLOCK
        )

    @classmethod
    def from_mxfp4(cls, packed: torch.Tensor, scales: torch.Tensor, num_cols: int) -> QuantizedWeight:
        """From stored packed e2m1 (uint8/int8/float4_e2m1fn_x2) and UE8M0 scales, logical `num_cols`."""
        packed = as_uint8_bytes(packed)
        shape = (*packed.shape[:-1], num_cols)
        return cls(packed, as_uint8_bytes(scales), E2M1, MXFP4_BLOCK, shape, WeightLayout.MXFP4)

    @classmethod
    def quantize(cls, w: torch.Tensor, layout: WeightLayout) -> QuantizedWeight:
        """Quantize a float weight [..., out, in] with the release's rule for `layout`."""
        if layout is WeightLayout.FP8_BLOCK:
            return cls.from_fp8_block(*quantize_fp8_block(w))
        if layout is WeightLayout.MXFP4:
            if w.dim() < 2:
                raise ValueError(f"weights must be [..., out, in], got {tuple(w.shape)=}")
            return cls.from_mxfp4(*quantize_mxfp4(w), num_cols=w.shape[-1])
        raise ValueError(f"unknown {layout=}")

    # --- views --------------------------------------------------------------------------------

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The logical [..., out, in] values in `dtype` (a full-size copy: for tests and references)."""
        if self.layout is WeightLayout.FP8_BLOCK:
            return dequantize_fp8_block(self.codes, self.scales, self.fmt, self.block, dtype)
        return dequantize_mxfp4(self.codes, self.scales, dtype, num_cols=self.shape[-1])

    @property
    def nbytes(self) -> int:
        """Bytes held by codes and scales."""
        return self.codes.numel() + self.scales.numel()

    @property
    def device(self) -> torch.device:
        return self.codes.device

    def to(self, device: torch.device | str) -> QuantizedWeight:
        """A copy on `device` (the same object if already there)."""
        device = torch.device(device)
        if self.codes.device == device:
            return self
        return QuantizedWeight(
            self.codes.to(device), self.scales.to(device), self.fmt, self.block, self.shape, self.layout
        )
