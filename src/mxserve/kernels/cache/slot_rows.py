"""`SlotRows`: the stored bytes of a fixed list of slots, saved and put back in any number of
caches that share one page layout, with fixed shapes and no host sync.

What a speculative rollback needs (`mxserve.engine.speculative.row_snapshot`): the same R slots
(one per verified row) in every layer's cache of one pool. Every layer's cache of a pool has the
same `PageLayout`, so the byte offsets, and the word-index tensors that gather them, are
computed once per pool here; each cache then costs one gather per part (data, scales) to save
and a gather, a select and a scatter per part to restore, instead of recomputing the address
math per cache and per call (`PagedCache.read_bytes` / `write_bytes`).

Slot −1 rows (padding, or a row that emits no compressed entry) stand in for the first valid row
of the list: they read its bytes and, on restore, write exactly the bytes that row writes, to
the same place — duplicate writes of identical bytes, never a race and never a write elsewhere.
A list with no valid slot reads and rewrites slot 0's own bytes (nothing changes).

On CUDA one Triton launch per cache and direction does the same byte moves with the address
math in registers (`_slot_rows_kernel`; a masked store writes only the chosen valid rows, so no
stand-in rows are needed): the rollback of a verify step was ~270 tiny torch launches of the
default model's graphed speculative step. MXSERVE_TORCH_SLOT_ROWS=1 keeps the torch form there
(the off switch); MXSERVE_TRITON_SLOT_ROWS=1 runs the kernels under TRITON_INTERPRET=1 (tests).
"""

from __future__ import annotations

import math

import torch

from mxserve.kernels.cache.page_layout import INVALID_SLOT
from mxserve.kernels.cache.paged_cache import PagedCache
from mxserve.kernels.triton_switch import small_kernel_on

_PIECE = 1024  # bytes of a row one program moves


def use_triton(slots: torch.Tensor) -> bool:
    return small_kernel_on(slots, "SLOT_ROWS")


class SlotRows:
    def __init__(self, like: PagedCache, slots: torch.Tensor) -> None:
        """`like`: any cache of the layout; slots [R] int64 (−1 = none)."""
        self.layout = like.layout
        self.buffer_bytes = like.buffer.numel()
        slots = slots.reshape(-1).to(device=like.device, dtype=torch.int64).contiguous()
        self.slots = slots
        self._triton = use_triton(slots)
        if self._triton:
            return
        valid = slots != INVALID_SLOT
        rows = torch.arange(slots.shape[0], device=slots.device)
        first = torch.argmax(valid.to(torch.int8))  # 0 when no row is valid
        self._stand_in = torch.where(valid, rows, first)  # each row's source row: itself, or the first valid
        self._real = valid[self._stand_in]  # False only where no row of the list is valid
        data_off, scale_off = self.layout.addresses(slots[self._stand_in].clamp(min=0))
        lay = self.layout
        align_d = math.gcd(lay.block_stride_bytes, lay.data_bytes)
        align_s = math.gcd(lay.block_stride_bytes, lay.block_size * lay.data_bytes, lay.scale_bytes or 1)
        self._parts = [self._word_index(data_off, lay.data_bytes, align_d)]
        if lay.scale_bytes:
            self._parts.append(self._word_index(scale_off, lay.scale_bytes, align_s))

    def _word_index(self, offsets: torch.Tensor, width: int, align: int) -> tuple[torch.dtype, torch.Tensor]:
        """The widest word (8/4/2/1 bytes) that tiles every run, and the [R, width/word] word indices."""
        for word, dtype in ((8, torch.int64), (4, torch.int32), (2, torch.int16), (1, torch.uint8)):
            if width % word == 0 and align % word == 0 and self.buffer_bytes % word == 0:
                span = torch.arange(width // word, device=offsets.device, dtype=torch.int64)
                return dtype, (offsets // word)[:, None] + span[None, :]
        raise AssertionError("a 1-byte word always tiles")

    def _words(self, cache: PagedCache, dtype: torch.dtype) -> torch.Tensor:
        if cache.layout != self.layout or cache.buffer.numel() != self.buffer_bytes:
            raise ValueError(f"SlotRows: {cache!r} does not have the layout these rows were computed for")
        return cache.buffer.view(dtype)

    def save(self, cache: PagedCache) -> list[torch.Tensor]:
        """The rows' stored bytes in `cache`, one tensor per part (as words; one uint8 [R, data +
        scale bytes] tensor on the Triton path)."""
        if self._triton:
            self._words(cache, torch.uint8)
            lay = self.layout
            out = torch.empty(self.slots.shape[0], lay.data_bytes + lay.scale_bytes, dtype=torch.uint8,
                              device=self.slots.device)
            self._launch("save", cache, out, None)
            return [out]
        return [self._words(cache, dtype)[index] for dtype, index in self._parts]

    def restore(self, cache: PagedCache, saved: list[torch.Tensor], rows: torch.Tensor) -> None:
        """Write `saved` (from `save` on this cache) back where `rows` [R] (bool) is set; the other
        rows' bytes are rewritten unchanged."""
        if self._triton:
            self._words(cache, torch.uint8)
            self._launch("restore", cache, saved[0], rows.to(torch.bool).contiguous())
            return
        chosen = (rows[self._stand_in] & self._real)[:, None]
        for (dtype, index), old in zip(self._parts, saved, strict=True):
            words = self._words(cache, dtype)
            words.index_put_((index.reshape(-1),), torch.where(chosen, old, words[index]).reshape(-1))

    def _launch(self, direction: str, cache: PagedCache, rows_bytes: torch.Tensor, chosen: torch.Tensor | None) -> None:
        from mxserve.kernels.cache._slot_rows_kernel import _restore_rows_kernel, _save_rows_kernel

        lay = self.layout
        num_rows = self.slots.shape[0]
        if num_rows == 0:
            return
        grid = (num_rows, -(-(lay.data_bytes + lay.scale_bytes) // _PIECE))
        shape = dict(DATA=lay.data_bytes, SCALE=lay.scale_bytes, BLOCK=_PIECE)
        if direction == "save":
            _save_rows_kernel[grid](cache.buffer, self.slots, rows_bytes, lay.block_size, lay.block_stride_bytes,
                                    **shape)
        else:
            _restore_rows_kernel[grid](cache.buffer, self.slots, rows_bytes, chosen, lay.block_size,
                                       lay.block_stride_bytes, **shape)
