"""Entry codecs: how one cache entry's values become (data bytes, scale bytes) and back.

A paged cache stores every entry as `data_bytes` of payload plus `scale_bytes` of scales
(`PageLayout`); the codec says what those bytes mean. The number formats themselves live in
`mxserve.formats` (the spec); this file only adapts them to the "(data, scales) byte rows"
contract the paged caches move around, so the caches never know a format's internals.

Codecs here:
* `DsMlaCodec`: spec §8.1 fp8_ds_mla, 512 values -> 576 data bytes (448 e4m3fn NoPE codes +
  64 little-endian BF16 RoPE values) + 8 scale bytes (7 UE8M0 + 1 pad).
* `IndexerFp8Codec`: spec §8.2 FP8 indexer key, 128 values -> 128 e4m3fn codes + one fp32
  power-of-two scale stored as its 4 little-endian bytes.
* `PlainRowCodec`: BF16 or FP32 rows, no scales (exact comparison modes).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Protocol

import torch

from mxserve.formats import (
    DS_MLA_DATA_BYTES,
    DS_MLA_SCALE_BYTES,
    decode_ds_mla_parts,
    decode_indexer_key_fp8,
    encode_ds_mla_parts,
    encode_indexer_key_fp8,
)

# Byte views of bf16/fp32 values below reinterpret memory in native order; the cache formats
# are little-endian (spec §8.1), so a big-endian host would silently write a different format.
if sys.byteorder != "little":  # pragma: no cover - no supported platform is big-endian
    raise ImportError("mxserve cache codecs assume a little-endian host")


class EntryCodec(Protocol):
    """Turns [N, head_dim] values into byte rows and back (see module doc)."""

    head_dim: int
    data_bytes: int
    scale_bytes: int

    def encode(self, entries: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """entries float [N, head_dim] -> (data uint8 [N, data_bytes], scales uint8 [N, scale_bytes])."""
        ...

    def decode(self, data: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
        """(data uint8 [N, data_bytes], scales uint8 [N, scale_bytes]) -> float32 [N, head_dim]."""
        ...


@dataclass(frozen=True)
class DsMlaCodec:
    """fp8_ds_mla entries (spec §8.1); head_dim is fixed at 512 (448 NoPE + 64 RoPE)."""

    head_dim: int = 512
    data_bytes: int = DS_MLA_DATA_BYTES
    scale_bytes: int = DS_MLA_SCALE_BYTES

    def encode(self, entries: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        data, scales = encode_ds_mla_parts(entries)
        return data.contiguous(), scales.contiguous()

    def decode(self, data: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
        return decode_ds_mla_parts(data, scales).to(torch.float32)


@dataclass(frozen=True)
class IndexerFp8Codec:
    """FP8 indexer keys (spec §8.2): 128 e4m3fn codes + one fp32 pow2 scale per key."""

    head_dim: int = 128
    data_bytes: int = 128
    scale_bytes: int = 4

    def encode(self, entries: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        codes, scale = encode_indexer_key_fp8(entries)
        # fp32 [N] -> its 4 bytes per key, [N, 4] (little-endian, see the module-level check).
        scale_bytes = scale.to(torch.float32).reshape(-1, 1).contiguous().view(torch.uint8)
        return codes.contiguous(), scale_bytes

    def decode(self, data: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
        scale = scales.contiguous().view(torch.float32).reshape(-1)
        return decode_indexer_key_fp8(data, scale).to(torch.float32)


@dataclass(frozen=True)
class PlainRowCodec:
    """Rows stored as `dtype` values (bf16 or fp32), no scales; decode returns float32.

    bf16 rounds to nearest-even on encode (torch's cast); fp32 is exact.
    """

    head_dim: int
    dtype: torch.dtype

    def __post_init__(self) -> None:
        if self.dtype not in (torch.bfloat16, torch.float32):
            raise ValueError(f"plain rows must be bf16 or fp32, got {self.dtype=}")
        if self.head_dim <= 0:
            raise ValueError(f"head_dim must be > 0, got {self.head_dim=}")

    @property
    def data_bytes(self) -> int:
        return self.head_dim * self.dtype.itemsize

    @property
    def scale_bytes(self) -> int:
        return 0

    def encode(self, entries: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        rows = entries.to(self.dtype).contiguous().view(torch.uint8)
        return rows, rows.new_empty((rows.shape[0], 0))

    def decode(self, data: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
        return data.contiguous().view(self.dtype).to(torch.float32)
