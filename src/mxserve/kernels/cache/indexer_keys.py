"""`PagedIndexerKeyCache`: the Lightning Indexer's key cache of one CSA layer (spec §8.2).

Modes:
* `fp8` — the real format: each page is `[B x 128 e4m3fn codes][B x 4-byte fp32 scale][pad]`,
  one power-of-two scale per 128-dim key; default stride exactly `B * 132`.
* `bf16` / `fp32` — plain rows, any head_dim, for exact comparisons.

(The MXFP4 variant of §8.2 is not implemented yet; it is another codec on the same layout.)
"""

from __future__ import annotations

from enum import StrEnum

import torch

from mxserve.kernels.cache.entry_codecs import EntryCodec, IndexerFp8Codec, PlainRowCodec
from mxserve.kernels.cache.paged_cache import PagedCache

INDEXER_HEAD_DIM = 128


class IndexerCacheMode(StrEnum):
    FP8 = "fp8"  # 128 e4m3fn codes + fp32 pow2 scale, 132 logical bytes per key
    BF16 = "bf16"
    FP32 = "fp32"


class PagedIndexerKeyCache(PagedCache):
    """Paged indexer keys (128-dim for fp8; any dim for bf16/fp32).

    Args as `PagedKVCache` (no rope_dim). Default stride: B * bytes_per_entry (no padding).
    `write(slots, keys)` / `read(slots)` / `entry_addresses(slots)`: see `PagedCache`.
    """

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        *,
        mode: IndexerCacheMode | str = IndexerCacheMode.FP8,
        head_dim: int = INDEXER_HEAD_DIM,
        block_stride_bytes: int | None = None,
        buffer: torch.Tensor | None = None,
        device: torch.device | str | None = None,
    ) -> None:
        try:
            self.mode = IndexerCacheMode(mode)
        except ValueError:
            raise ValueError(
                f"unknown indexer cache mode {mode!r}; choose one of {[m.value for m in IndexerCacheMode]}"
            ) from None
        codec: EntryCodec
        if self.mode is IndexerCacheMode.FP8:
            if head_dim != INDEXER_HEAD_DIM:
                raise ValueError(f"fp8 indexer keys are 128-dim, got {head_dim=} (use mode='bf16' or 'fp32')")
            codec = IndexerFp8Codec()
        else:
            codec = PlainRowCodec(
                head_dim, torch.bfloat16 if self.mode is IndexerCacheMode.BF16 else torch.float32
            )
        if block_stride_bytes is None:
            block_stride_bytes = block_size * (codec.data_bytes + codec.scale_bytes)
        super().__init__(
            codec, num_blocks, block_size, block_stride_bytes=block_stride_bytes, buffer=buffer, device=device
        )
