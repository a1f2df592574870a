"""Lightning-indexer key codecs (spec §8.2): FP8 with one fp32 power-of-two scale per key, or MXFP4.

FP8: per key (last dim, 128 in V4), s = 2^ceil(log2(max(amax, 1e-4) / 448)) stored as an fp32
value (not an exponent byte), codes = RNE e4m3fn of clamp(k / s, -448, 448). MXFP4: the weight
MXFP4 codec applied to keys: [..., 64] packed e2m1 (low nibble = even element) + [..., 4] UE8M0
bytes for a 128-dim key, floor 6 * 2^-126. Both are pure functions; the paged layout lives with
the cache. No function here syncs with the host.
"""

from __future__ import annotations

import torch

from mxserve.formats.codec import decode, encode
from mxserve.formats.descriptor import E4M3FN
from mxserve.formats.mxfp4 import dequantize_mxfp4, quantize_mxfp4
from mxserve.formats.pow2 import exp2_int, pow2_ceil_exponent

INDEXER_KEY_DIM = 128
INDEXER_FP8_AMAX_FLOOR = 1e-4


def encode_indexer_key_fp8(k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """k [..., d] -> (codes uint8 [..., d], scale float32 [...], an exact power of two)."""
    if k.dim() == 0:
        raise ValueError("indexer keys must be [..., d]")
    kf = k.to(torch.float32)
    amax = kf.abs().amax(dim=-1) if kf.numel() else kf.new_zeros(kf.shape[:-1])
    scale = exp2_int(pow2_ceil_exponent(amax, E4M3FN.max_finite, INDEXER_FP8_AMAX_FLOOR))
    scaled = (kf / scale.unsqueeze(-1)).clamp(-E4M3FN.max_finite, E4M3FN.max_finite)
    return encode(scaled, E4M3FN), scale


def decode_indexer_key_fp8(codes: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """(codes [..., d], scale [...]) -> float32 [..., d]."""
    if codes.shape[:-1] != scale.shape:
        raise ValueError(
            f"indexer key codes {tuple(codes.shape)} and scale {tuple(scale.shape)} do not match"
        )
    return decode(codes, E4M3FN) * scale.to(torch.float32).unsqueeze(-1)


def encode_indexer_key_mxfp4(k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """k [..., d] -> (packed uint8 [..., d/2], scales uint8 UE8M0 [..., d/32]); d a multiple of 32.

    No host sync (runs every decode step): a non-finite key gets unspecified codes.
    """
    if k.dim() == 0 or k.shape[-1] % 32:
        raise ValueError(
            f"MXFP4 indexer keys need a last dim that is a multiple of 32, got {tuple(k.shape)=}"
        )
    return quantize_mxfp4(k, validate=False)


def decode_indexer_key_mxfp4(packed: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """(packed [..., d/2], scales [..., d/32]) -> float32 [..., d]."""
    return dequantize_mxfp4(packed, scales)
