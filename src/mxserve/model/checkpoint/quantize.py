"""Turning a full-precision linear into the release's stored form, and back.

The release chooses the format per linear (dsv4-spec §6.6): FP8 e4m3 with 128x128 UE8M0 block
scales for dense projections, MXFP4 for routed experts, BF16 for the compressor / indexer
projections. `to_release` applies that choice through `mxserve.formats` (power-of-two ceiling
scales, so nothing clips); `to_full_precision` is the exact inverse view (dequantized values are
exactly representable in BF16: an e4m3 / e2m1 value times a power of two).
"""

from __future__ import annotations

import torch

from mxserve.formats import E4M3FN, QuantizedWeight, quantize_fp8_block, quantize_mxfp4
from mxserve.model.checkpoint.inventory import LinearSpec, ReleaseFormat


def to_release(w: torch.Tensor, spec: LinearSpec) -> QuantizedWeight | torch.Tensor:
    """Quantize `w` [out, in] with the release format of `spec` (BF16 linears are cast)."""
    if tuple(w.shape) != spec.logical_shape:
        raise ValueError(f"{spec.prefix}: weight shape {tuple(w.shape)} is not {spec.logical_shape}")
    if spec.release_format is ReleaseFormat.FP8_BLOCK:
        codes, scales = quantize_fp8_block(w.float(), E4M3FN, spec.block)
        return QuantizedWeight.from_fp8_block(codes, scales, block=spec.block, fmt=E4M3FN)
    if spec.release_format is ReleaseFormat.MXFP4:
        packed, scales = quantize_mxfp4(w.float())
        return QuantizedWeight.from_mxfp4(packed, scales, spec.in_features)
    return w.to(torch.bfloat16)


def to_full_precision(w: QuantizedWeight | torch.Tensor, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """Dequantize a packed weight to `dtype`; a full-precision tensor is returned as stored."""
    if isinstance(w, torch.Tensor):
        return w
    return w.dequantize(dtype)
