"""`CompressorStateCache`: per-position compressor rows of one layer (spec §5, §8.3).

One fp32 row per token position, `[a_t (c*d) | z_t + ape[p mod m] (c*d)]`: the projections
the CSA/HCA compressor pools over (c*d = 1024 CSA main, 256 CSA indexer, 512 HCA). Storing a
row per position (vLLM's choice) instead of a shifting buffer makes the state rewindable and
makes "never process a position twice" checkable: a position is one slot.

Paged like the KV caches (slot = block_table[p // B] * B + p % B, B = 4 CSA / 8 HCA in vLLM),
plain fp32 rows, same flat byte buffer and address function (`PagedCache`). The only
difference is what an absent row reads as: slot -1 (a position before 0, or outside the
window) reads as `a = 0, z = -inf`, i.e. logit -inf and value 0, exactly what the pooling
softmax needs (spec §3.4.3: weight 0 for missing slots).
"""

from __future__ import annotations

import torch

from mxserve.kernels.cache.entry_codecs import PlainRowCodec
from mxserve.kernels.cache.page_layout import INVALID_SLOT
from mxserve.kernels.cache.paged_cache import PagedCache


class CompressorStateCache(PagedCache):
    """fp32 rows of width `row_width` (= 2*c*d, even) per token position, paged.

    `write(slots, rows)`: rows float32 [N, row_width] (other dtypes are rejected: the state is
    fp32 by spec, a silent bf16 round would change the pooled entries). Slot -1 skipped,
    duplicate valid slots in one call are an error.
    `read(slots)`: float32 S + [row_width]; absent (-1) rows are `[0]*(row_width/2) + [-inf]*(row_width/2)`.
    Default page stride B * row_width * 4 bytes; `buffer.view(torch.float32)` is the row array.
    """

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        row_width: int,
        *,
        block_stride_bytes: int | None = None,
        buffer: torch.Tensor | None = None,
        device: torch.device | str | None = None,
    ) -> None:
        if row_width <= 0 or row_width % 2:
            raise ValueError(f"row_width must be positive and even ([a | z] halves), got {row_width=}")
        codec = PlainRowCodec(row_width, torch.float32)
        if block_stride_bytes is None:
            block_stride_bytes = block_size * codec.data_bytes
        super().__init__(
            codec, num_blocks, block_size, block_stride_bytes=block_stride_bytes, buffer=buffer, device=device
        )

    @property
    def row_width(self) -> int:
        return self.head_dim

    def write(self, slots: torch.Tensor, entries: torch.Tensor) -> None:
        if entries.dtype != torch.float32:
            raise ValueError(f"compressor state rows are fp32, got {entries.dtype=}")
        super().write(slots, entries)

    def read(self, slots: torch.Tensor) -> torch.Tensor:
        rows = super().read(slots)
        absent = self._as_slots(slots) == INVALID_SLOT
        half = self.row_width // 2
        # a-half stays 0 (value 0); z-half becomes -inf (logit -inf -> softmax weight 0).
        rows[..., half:].masked_fill_(absent[..., None], float("-inf"))
        return rows
