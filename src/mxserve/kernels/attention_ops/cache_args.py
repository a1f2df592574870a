"""The numbers a Triton kernel needs to address a paged cache, taken from the cache object.

Kernels never infer a layout: they receive the flat byte buffer, `block_size`, the page stride,
the data/scale bytes per entry and the entry encoding, all read from the cache's `PageLayout`
and codec here, in one place (field-notes §3: the reader that guessed the layout).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

import torch

from mxserve.kernels.cache import CompressorStateCache, PagedCache, PagedIndexerKeyCache, PagedKVCache


class EntryMode(IntEnum):
    """How an entry's bytes encode its values (a constexpr of every kernel that touches them)."""

    DS_MLA = 0  # spec §8.1: 448 e4m3fn codes + 64 LE BF16 | 7 UE8M0 scale bytes + pad
    BF16 = 1  # plain little-endian BF16 rows
    FP32 = 2  # plain little-endian FP32 rows
    INDEXER_FP8 = 3  # spec §8.2: 128 e4m3fn codes | one fp32 power-of-two scale


@dataclass(frozen=True)
class CacheArgs:
    buffer: torch.Tensor  # uint8 [bytes], flat: the cache's own memory
    block_size: int  # B, entries per page
    stride: int  # page stride in bytes (>= B * (data + scale))
    data_bytes: int
    scale_bytes: int
    mode: EntryMode
    head_dim: int


def cache_args(cache: PagedCache) -> CacheArgs:
    """Kernel arguments of `cache`; ValueError for a cache/encoding no kernel implements."""
    layout = cache.layout
    if isinstance(cache, PagedKVCache):
        mode = {"fp8_ds_mla": EntryMode.DS_MLA, "bf16": EntryMode.BF16, "fp32": EntryMode.FP32}[cache.mode.value]
    elif isinstance(cache, PagedIndexerKeyCache):
        mode = {"fp8": EntryMode.INDEXER_FP8, "bf16": EntryMode.BF16, "fp32": EntryMode.FP32}[cache.mode.value]
    elif isinstance(cache, CompressorStateCache):
        mode = EntryMode.FP32
    else:
        raise ValueError(f"no Triton addressing for cache type {type(cache).__name__}")
    return CacheArgs(cache.buffer, layout.block_size, layout.block_stride_bytes, layout.data_bytes,
                     layout.scale_bytes, mode, cache.head_dim)
