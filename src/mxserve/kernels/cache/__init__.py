"""Paged caches of one layer: fp8_ds_mla / plain KV, FP8 indexer keys, compressor state rows.

Each cache is one object owning a flat uint8 buffer and its address math (`PageLayout`);
writer and reader share that one address function (spec §8, docs/kv-cache-layout.md).
"""

from mxserve.kernels.cache.block_table import (
    BlockTable,
    SimpleBlockAllocator,
    num_blocks_for,
    slots_from_block_table,
)
from mxserve.kernels.cache.compressor_state import CompressorStateCache
from mxserve.kernels.cache.indexer_keys import IndexerCacheMode, PagedIndexerKeyCache
from mxserve.kernels.cache.page_layout import INVALID_SLOT, PageLayout, round_up
from mxserve.kernels.cache.paged_cache import PagedCache
from mxserve.kernels.cache.paged_kv import KVCacheMode, PagedKVCache, default_kv_block_stride_bytes
from mxserve.kernels.cache.slot_rows import SlotRows

__all__ = [
    "INVALID_SLOT",
    "BlockTable",
    "CompressorStateCache",
    "IndexerCacheMode",
    "KVCacheMode",
    "PageLayout",
    "PagedCache",
    "PagedIndexerKeyCache",
    "PagedKVCache",
    "SimpleBlockAllocator",
    "SlotRows",
    "default_kv_block_stride_bytes",
    "num_blocks_for",
    "round_up",
    "slots_from_block_table",
]
