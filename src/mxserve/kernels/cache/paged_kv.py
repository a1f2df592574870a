"""`PagedKVCache`: the window-KV and compressed-KV cache of one layer (spec §8.1).

Modes:
* `fp8_ds_mla` — the real format: each page is `[B x 576 data bytes][B x 8 scale bytes][pad]`,
  page stride `round_up(B*584, 576)` unless the allocator passes a larger one. Requires
  head_dim 512 with 64 RoPE channels (448 FP8 NoPE + 64 BF16 RoPE).
* `bf16` / `fp32` — plain rows `[B x head_dim]` of that dtype per page, default stride exactly
  `B * head_dim * itemsize`; any head_dim. For exact comparisons (oracle / `exact` mode).

Construction and mode checks live here; storage, the address function and the writer/reader
are `PagedCache`'s.
"""

from __future__ import annotations

from enum import StrEnum

import torch

from mxserve.kernels.cache.entry_codecs import DsMlaCodec, EntryCodec, PlainRowCodec
from mxserve.kernels.cache.page_layout import round_up
from mxserve.kernels.cache.paged_cache import PagedCache

DS_MLA_HEAD_DIM = 512
DS_MLA_ROPE_DIM = 64


class KVCacheMode(StrEnum):
    FP8_DS_MLA = "fp8_ds_mla"  # spec §8.1 split pages, 584 logical bytes per entry
    BF16 = "bf16"  # plain BF16 rows
    FP32 = "fp32"  # plain FP32 rows (bit-exact storage for fp32 oracle runs)


def default_kv_block_stride_bytes(
    mode: KVCacheMode | str, block_size: int, head_dim: int = DS_MLA_HEAD_DIM
) -> int:
    """Page stride used when the allocator gives none.

    fp8_ds_mla: round_up(B*584, 576) as FlashMLA/vLLM pad it (B=64 -> 37440; B=32 -> 19008).
    Plain rows: B * head_dim * itemsize (no padding).
    """
    mode = KVCacheMode(mode)
    if mode is KVCacheMode.FP8_DS_MLA:
        codec = DsMlaCodec()
        return round_up(block_size * (codec.data_bytes + codec.scale_bytes), codec.data_bytes)
    itemsize = 2 if mode is KVCacheMode.BF16 else 4
    return block_size * head_dim * itemsize


class PagedKVCache(PagedCache):
    """Paged 512-dim (fp8_ds_mla) or any-dim (bf16/fp32) KV entries of one layer.

    Args: num_blocks, block_size (B entries per page); mode; head_dim (512 for fp8_ds_mla);
    rope_dim (64, fp8_ds_mla only: the last 64 channels are stored BF16); block_stride_bytes
    (None -> `default_kv_block_stride_bytes`; any value >= one page's bytes); buffer (optional
    caller-owned contiguous uint8 memory of >= num_blocks*stride bytes, used in place);
    device. Raises ValueError naming the bad value.

    `write(slots, entries)` / `read(slots)` / `entry_addresses(slots)`: see `PagedCache`.
    """

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        *,
        mode: KVCacheMode | str = KVCacheMode.FP8_DS_MLA,
        head_dim: int = DS_MLA_HEAD_DIM,
        rope_dim: int = DS_MLA_ROPE_DIM,
        block_stride_bytes: int | None = None,
        buffer: torch.Tensor | None = None,
        device: torch.device | str | None = None,
    ) -> None:
        try:
            self.mode = KVCacheMode(mode)
        except ValueError:
            raise ValueError(
                f"unknown KV cache mode {mode!r}; choose one of {[m.value for m in KVCacheMode]}"
            ) from None
        codec: EntryCodec
        if self.mode is KVCacheMode.FP8_DS_MLA:
            if head_dim != DS_MLA_HEAD_DIM or rope_dim != DS_MLA_ROPE_DIM:
                raise ValueError(
                    f"fp8_ds_mla stores 448 FP8 NoPE + 64 BF16 RoPE channels: needs head_dim=512, rope_dim=64, "
                    f"got {head_dim=}, {rope_dim=} (use mode='bf16' or 'fp32' for other shapes)"
                )
            codec = DsMlaCodec()
        else:
            codec = PlainRowCodec(
                head_dim, torch.bfloat16 if self.mode is KVCacheMode.BF16 else torch.float32
            )
        self.rope_dim = rope_dim
        if block_stride_bytes is None:
            block_stride_bytes = default_kv_block_stride_bytes(self.mode, block_size, head_dim)
        super().__init__(
            codec, num_blocks, block_size, block_stride_bytes=block_stride_bytes, buffer=buffer, device=device
        )
