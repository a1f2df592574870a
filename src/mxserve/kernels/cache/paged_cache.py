"""`PagedCache`: one flat uint8 buffer of split pages, its `PageLayout`, and its entry codec.

This is the object spec §8 asks for: it owns the buffer *and* the address math, and its
writer (`write`) and reader (`read`, `read_bytes`) both go through `entry_addresses`, the one
address function (`PageLayout.addresses`). The buffer is deliberately flat bytes: there is no
`[num_blocks, B, entry_bytes]` view to misread (field-notes §3). `PagedKVCache` and
`PagedIndexerKeyCache` pick the codec and validate the mode; everything else is here.

Torch reference implementation: vectorised gathers/scatters over byte offsets, any device.
Two equal-result forms of the writer and readers: on the CPU they select the valid rows
(`nonzero`, a data-dependent shape); on a GPU (or with `sync_free=True`) they keep every row's
shape fixed and never read anything back to the host, so a decode step that writes the
compressor state can be captured in a CUDA graph (`_write_fixed` / `_read_fixed_bytes`).
"""

from __future__ import annotations

import math

import torch

from mxserve.kernels.cache._bytes import check_unique_slots, gather_bytes, scatter_bytes
from mxserve.kernels.cache.entry_codecs import EntryCodec
from mxserve.kernels.cache.page_layout import INVALID_SLOT, PageLayout


class PagedCache:
    """Paged cache of `num_blocks * block_size` entries of `codec.head_dim` values.

    Slots are global ids `block_id * block_size + pos`; -1 marks padding / absent entries.
    Write semantics: slot -1 writes nothing; a valid slot repeated within one `write` call is a
    ValueError (see `_bytes.check_unique_slots`); a later call may overwrite a slot.
    Read semantics: slot -1 reads as zeros (use `slots != -1` as the validity mask).
    """

    def __init__(
        self,
        codec: EntryCodec,
        num_blocks: int,
        block_size: int,
        *,
        block_stride_bytes: int,
        buffer: torch.Tensor | None = None,
        device: torch.device | str | None = None,
    ) -> None:
        self.codec = codec
        self.layout = PageLayout(
            num_blocks, block_size, codec.data_bytes, codec.scale_bytes, block_stride_bytes
        )
        if buffer is None:
            buffer = torch.zeros(self.layout.buffer_bytes, dtype=torch.uint8, device=device)
        else:
            if buffer.dtype != torch.uint8 or not buffer.is_contiguous():
                raise ValueError(
                    f"buffer must be a contiguous uint8 tensor, got {buffer.dtype=}, {buffer.stride()=}"
                )
            if buffer.numel() < self.layout.buffer_bytes:
                raise ValueError(
                    f"buffer has {buffer.numel()} bytes, layout needs {self.layout.buffer_bytes} "
                    f"({num_blocks=} x {block_stride_bytes=})"
                )
            if device is not None and torch.device(device) != buffer.device:
                raise ValueError(f"{device=} disagrees with {buffer.device=}")
            buffer = buffer.view(-1)  # a view: the caller's memory is the cache
        self.buffer = buffer  # uint8 [>= num_blocks * block_stride_bytes], flat
        self.sync_free: bool | None = None  # None: the fixed-shape forms on CUDA tensors only (tests force True)

    # -- shape facts ------------------------------------------------------------------------

    @property
    def num_blocks(self) -> int:
        return self.layout.num_blocks

    @property
    def block_size(self) -> int:
        return self.layout.block_size

    @property
    def block_stride_bytes(self) -> int:
        return self.layout.block_stride_bytes

    @property
    def bytes_per_entry(self) -> int:
        """Logical bytes of one entry (data + scales): 584 fp8_ds_mla, 132 fp8 indexer, ..."""
        return self.layout.entry_bytes

    @property
    def num_slots(self) -> int:
        return self.layout.num_slots

    @property
    def head_dim(self) -> int:
        return self.codec.head_dim

    @property
    def device(self) -> torch.device:
        return self.buffer.device

    # -- the address function ---------------------------------------------------------------

    def entry_addresses(self, slots: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(data_offsets, scale_offsets) int64, same shape as `slots`, -1 for slot -1.

        Byte offsets into `buffer`; see `PageLayout.addresses` for the formulas.
        """
        return self.layout.addresses(self._as_slots(slots))

    # -- writer ------------------------------------------------------------------------------

    def write(self, slots: torch.Tensor, entries: torch.Tensor) -> None:
        """Encode `entries` and store entry i at `slots[i]`.

        slots: int [N] (or any shape S); entries: float32/bf16 [N, head_dim] (or S + [head_dim]).
        Rows whose slot is -1 are skipped (their values are not even encoded).
        Raises ValueError on shape/dtype mismatch, out-of-range or duplicate valid slots.
        """
        slots = self._as_slots(slots)
        if not entries.dtype.is_floating_point:
            raise ValueError(f"entries must be floating point, got {entries.dtype=}")
        if tuple(entries.shape) != (*slots.shape, self.head_dim):
            raise ValueError(
                f"entries shape {tuple(entries.shape)} != slots shape {tuple(slots.shape)} + ({self.head_dim},)"
            )
        data_off, scale_off = self.layout.addresses(slots)
        flat_slots = slots.reshape(-1)
        check_unique_slots(flat_slots)
        if self._fixed_shape(flat_slots):
            self._write_fixed(flat_slots, data_off.reshape(-1), scale_off.reshape(-1),
                              entries.reshape(-1, self.head_dim).to(self.device))
            return
        keep = (flat_slots != INVALID_SLOT).nonzero().squeeze(1)
        if keep.numel() == 0:
            return
        rows = entries.reshape(-1, self.head_dim).to(self.device)[keep]
        data, scales = self.codec.encode(rows)
        scatter_bytes(self.buffer, data_off.reshape(-1)[keep], data)
        if self.layout.scale_bytes:
            scatter_bytes(self.buffer, scale_off.reshape(-1)[keep], scales)

    # -- readers -----------------------------------------------------------------------------

    def read_bytes(self, slots: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Raw stored bytes: (data uint8 S + [data_bytes], scales uint8 S + [scale_bytes]).

        Slot -1 gives zero bytes. This is what a fused kernel would load before dequantizing.
        """
        slots = self._as_slots(slots)
        data_off, scale_off = self.layout.addresses(slots)
        flat_slots = slots.reshape(-1)
        if self._fixed_shape(flat_slots):
            data, scales = self._read_fixed_bytes(flat_slots, data_off.reshape(-1), scale_off.reshape(-1))
            return data.reshape(*slots.shape, -1), scales.reshape(*slots.shape, -1)
        keep = (flat_slots != INVALID_SLOT).nonzero().squeeze(1)
        n = flat_slots.numel()
        data = torch.zeros(n, self.layout.data_bytes, dtype=torch.uint8, device=self.device)
        scales = torch.zeros(n, self.layout.scale_bytes, dtype=torch.uint8, device=self.device)
        if keep.numel():
            data[keep] = gather_bytes(self.buffer, data_off.reshape(-1)[keep], self.layout.data_bytes)
            if self.layout.scale_bytes:
                scales[keep] = gather_bytes(self.buffer, scale_off.reshape(-1)[keep], self.layout.scale_bytes)
        return data.reshape(*slots.shape, -1), scales.reshape(*slots.shape, -1)

    def read(self, slots: torch.Tensor) -> torch.Tensor:
        """Gather and decode: float32 S + [head_dim]; slot -1 reads as zeros."""
        slots = self._as_slots(slots)
        data_off, scale_off = self.layout.addresses(slots)
        flat_slots = slots.reshape(-1)
        if self._fixed_shape(flat_slots):
            data, scales = self._read_fixed_bytes(flat_slots, data_off.reshape(-1), scale_off.reshape(-1))
            out = self.codec.decode(data, scales).float()
            out = torch.where((flat_slots != INVALID_SLOT)[:, None], out, torch.zeros_like(out))
            return out.reshape(*slots.shape, self.head_dim)
        keep = (flat_slots != INVALID_SLOT).nonzero().squeeze(1)
        out = torch.zeros(flat_slots.numel(), self.head_dim, dtype=torch.float32, device=self.device)
        if keep.numel():
            data = gather_bytes(self.buffer, data_off.reshape(-1)[keep], self.layout.data_bytes)
            if self.layout.scale_bytes:
                scales = gather_bytes(self.buffer, scale_off.reshape(-1)[keep], self.layout.scale_bytes)
            else:
                scales = data.new_empty((keep.numel(), 0))
            out[keep] = self.codec.decode(data, scales)
        return out.reshape(*slots.shape, self.head_dim)

    # -- fixed-shape (sync-free) forms -------------------------------------------------------

    def _fixed_shape(self, flat_slots: torch.Tensor) -> bool:
        return self.sync_free if self.sync_free is not None else flat_slots.is_cuda

    def _alignments(self) -> tuple[int, int]:
        """Divisors of every data / scale offset (page starts and entry sizes): the word width
        the byte movers may use without checking the offsets on the host."""
        lay = self.layout
        data = math.gcd(lay.block_stride_bytes, lay.data_bytes)
        scale = math.gcd(lay.block_stride_bytes, lay.block_size * lay.data_bytes, lay.scale_bytes or 1)
        return data, scale

    def _write_fixed(self, flat_slots: torch.Tensor, data_off: torch.Tensor, scale_off: torch.Tensor,
                     rows: torch.Tensor) -> None:
        """Every row is encoded and scattered (`_scatter_fixed`)."""
        if flat_slots.numel() == 0:
            return
        data, scales = self.codec.encode(rows)
        self._scatter_fixed(flat_slots, data_off, scale_off, data, scales)

    def _scatter_fixed(self, flat_slots: torch.Tensor, data_off: torch.Tensor, scale_off: torch.Tensor,
                       data: torch.Tensor, scales: torch.Tensor) -> None:
        """Store every row's bytes; a row with slot -1 instead repeats the first valid row's bytes
        at that row's offsets (identical bytes to one place: no race, nothing else written). With
        no valid row, every row rewrites slot 0's current bytes onto slot 0."""
        valid = flat_slots != INVALID_SLOT
        # the first valid row (0 when none), as a [1] index: indexing with a 0-dim tensor reads it back
        first = torch.argmax(valid.to(torch.int8)).view(1)
        any_valid = valid.any()
        align_d, align_s = self._alignments()
        slot0_d, slot0_s = self.layout.addresses(torch.zeros(1, dtype=torch.int64, device=self.device))
        keep_d = gather_bytes(self.buffer, slot0_d, self.layout.data_bytes, align_d)  # [1, bytes]
        fill_d = torch.where(any_valid, data.index_select(0, first)[0], keep_d[0])
        fill_off_d = torch.where(any_valid, data_off.index_select(0, first)[0], slot0_d[0])
        scatter_bytes(self.buffer, torch.where(valid, data_off, fill_off_d),
                      torch.where(valid[:, None], data, fill_d), align_d)
        if self.layout.scale_bytes:
            keep_s = gather_bytes(self.buffer, slot0_s, self.layout.scale_bytes, align_s)
            fill_s = torch.where(any_valid, scales.index_select(0, first)[0], keep_s[0])
            fill_off_s = torch.where(any_valid, scale_off.index_select(0, first)[0], slot0_s[0])
            scatter_bytes(self.buffer, torch.where(valid, scale_off, fill_off_s),
                          torch.where(valid[:, None], scales, fill_s), align_s)

    def _read_fixed_bytes(self, flat_slots: torch.Tensor, data_off: torch.Tensor,
                          scale_off: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Stored bytes of every row, slot -1 rows zeroed (they read slot 0's bytes first)."""
        valid = (flat_slots != INVALID_SLOT)[:, None]
        align_d, align_s = self._alignments()
        data = gather_bytes(self.buffer, data_off.clamp(min=0), self.layout.data_bytes, align_d)
        data = torch.where(valid, data, torch.zeros_like(data))
        if not self.layout.scale_bytes:
            return data, data.new_zeros((data.shape[0], 0))
        scales = gather_bytes(self.buffer, scale_off.clamp(min=0), self.layout.scale_bytes, align_s)
        return data, torch.where(valid, scales, torch.zeros_like(scales))

    # -- helpers -----------------------------------------------------------------------------

    def _as_slots(self, slots: torch.Tensor) -> torch.Tensor:
        if not isinstance(slots, torch.Tensor):
            slots = torch.as_tensor(slots, dtype=torch.int64)
        if slots.dtype.is_floating_point or slots.dtype == torch.bool:
            raise ValueError(f"slots must be an integer tensor, got {slots.dtype=}")
        return slots.to(device=self.device, dtype=torch.int64)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(codec={self.codec}, num_blocks={self.num_blocks}, "
            f"block_size={self.block_size}, block_stride_bytes={self.block_stride_bytes}, device={self.device})"
        )
