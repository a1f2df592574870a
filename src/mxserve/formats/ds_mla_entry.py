"""The `fp8_ds_mla` KV-cache entry codec (spec §8.1): one 512-dim latent <-> 584 bytes.

Entry layout (logical; the paged cache splits it into a 576-byte data part and an 8-byte scale
part stored in separate regions of a page, which is why the `_parts` functions exist):

    bytes   0..447  NoPE channels 0..447 as e4m3fn codes
    bytes 448..575  RoPE channels 448..511 as 64 BF16 values, little-endian (low byte first)
    bytes 576..582  7 UE8M0 scale bytes, byte g for NoPE channels 64g..64g+63
    byte  583       padding, always 0

Writer rule (vLLM's, bit for bit): x is first rounded to BF16; per NoPE block g,
amax_g = max(|x|, 1e-4), e_g = ceil(log2(amax_g / 448)), byte_g = clamp(e_g + 127, 0, 254), and
codes are RNE e4m3fn of clamp(x / 2^(byte_g - 127), -448, 448). (With the 1e-4 floor and BF16
input the byte clamp never binds for finite x; quantizing with the clamped byte keeps writer and
reader consistent regardless.) Reader: fp8 value * 2^(byte_g - 127); BF16 RoPE widened exactly.
"""

from __future__ import annotations

import torch

from mxserve.formats.bytes_view import as_uint8_bytes
from mxserve.formats.codec import decode, encode
from mxserve.formats.descriptor import E4M3FN
from mxserve.formats.pow2 import pow2_ceil_exponent, ue8m0_byte, ue8m0_value

DS_MLA_DIM = 512
DS_MLA_NOPE_DIM = 448
DS_MLA_ROPE_DIM = 64
DS_MLA_GROUP = 64
DS_MLA_NUM_GROUPS = DS_MLA_NOPE_DIM // DS_MLA_GROUP  # 7
DS_MLA_DATA_BYTES = DS_MLA_NOPE_DIM + 2 * DS_MLA_ROPE_DIM  # 576
DS_MLA_SCALE_BYTES = DS_MLA_NUM_GROUPS + 1  # 7 scales + 1 pad = 8
DS_MLA_ENTRY_BYTES = DS_MLA_DATA_BYTES + DS_MLA_SCALE_BYTES  # 584
DS_MLA_AMAX_FLOOR = 1e-4


def bf16_to_le_bytes(x: torch.Tensor) -> torch.Tensor:
    """BF16 [..., n] -> uint8 [..., 2n], little-endian (independent of the host's byte order)."""
    bits = x.to(torch.bfloat16).view(torch.int16).to(torch.int32) & 0xFFFF
    return (
        torch.stack((bits & 0xFF, bits >> 8), dim=-1).reshape(*x.shape[:-1], 2 * x.shape[-1]).to(torch.uint8)
    )


def le_bytes_to_bf16(b: torch.Tensor) -> torch.Tensor:
    """uint8 [..., 2n] little-endian -> BF16 [..., n]."""
    pairs = b.to(torch.int32).reshape(*b.shape[:-1], b.shape[-1] // 2, 2)
    bits = pairs[..., 0] | (pairs[..., 1] << 8)
    bits = torch.where(bits >= 0x8000, bits - 0x10000, bits)  # as a signed int16 value
    return bits.to(torch.int16).view(torch.bfloat16)


def _check_last_dim(t: torch.Tensor, n: int, what: str) -> None:
    if t.dim() == 0 or t.shape[-1] != n:
        raise ValueError(f"{what} must be [..., {n}], got {tuple(t.shape)=}")


def encode_ds_mla_parts(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [..., 512] -> (data uint8 [..., 576], scales uint8 [..., 8]) by the writer rule above."""
    _check_last_dim(x, DS_MLA_DIM, "ds_mla input")
    xb = x.to(torch.bfloat16)
    nope = xb[..., :DS_MLA_NOPE_DIM].to(torch.float32).reshape(*x.shape[:-1], DS_MLA_NUM_GROUPS, DS_MLA_GROUP)
    amax = nope.abs().amax(dim=-1) if nope.numel() else nope.new_zeros(nope.shape[:-1])
    scale_bytes = ue8m0_byte(pow2_ceil_exponent(amax, E4M3FN.max_finite, DS_MLA_AMAX_FLOOR))
    scaled = (nope / ue8m0_value(scale_bytes).unsqueeze(-1)).clamp(-E4M3FN.max_finite, E4M3FN.max_finite)
    codes = encode(scaled, E4M3FN).reshape(*x.shape[:-1], DS_MLA_NOPE_DIM)
    data = torch.cat((codes, bf16_to_le_bytes(xb[..., DS_MLA_NOPE_DIM:])), dim=-1)
    scales = torch.cat((scale_bytes, scale_bytes.new_zeros((*x.shape[:-1], 1))), dim=-1)
    return data, scales


def decode_ds_mla_parts(data: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """(data uint8 [..., 576], scales uint8 [..., 8]) -> float32 [..., 512]. The pad byte is ignored."""
    data, scales = as_uint8_bytes(data), as_uint8_bytes(scales)
    _check_last_dim(data, DS_MLA_DATA_BYTES, "ds_mla data")
    _check_last_dim(scales, DS_MLA_SCALE_BYTES, "ds_mla scales")
    if data.shape[:-1] != scales.shape[:-1]:
        raise ValueError(
            f"ds_mla data/scales leading dims differ: {tuple(data.shape)} vs {tuple(scales.shape)}"
        )
    lead = data.shape[:-1]
    nope = decode(data[..., :DS_MLA_NOPE_DIM], E4M3FN).reshape(*lead, DS_MLA_NUM_GROUPS, DS_MLA_GROUP)
    nope = nope * ue8m0_value(scales[..., :DS_MLA_NUM_GROUPS]).unsqueeze(-1)
    rope = le_bytes_to_bf16(data[..., DS_MLA_NOPE_DIM:]).to(torch.float32)
    return torch.cat((nope.reshape(*lead, DS_MLA_NOPE_DIM), rope), dim=-1)


def encode_ds_mla(x: torch.Tensor) -> torch.Tensor:
    """x [..., 512] -> entries uint8 [..., 584] (data then scales, the logical entry layout)."""
    return torch.cat(encode_ds_mla_parts(x), dim=-1)


def decode_ds_mla(entries: torch.Tensor) -> torch.Tensor:
    """entries uint8 [..., 584] -> float32 [..., 512]."""
    entries = as_uint8_bytes(entries)
    _check_last_dim(entries, DS_MLA_ENTRY_BYTES, "ds_mla entries")
    return decode_ds_mla_parts(entries[..., :DS_MLA_DATA_BYTES], entries[..., DS_MLA_DATA_BYTES:])
