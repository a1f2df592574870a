"""`PagedCache`: one flat uint8 buffer of split pages, its `PageLayout`, and its entry codec.

This is the object spec §8 asks for: it owns the buffer *and* the address math, and its
writer (`write`) and reader (`read`, `read_bytes`) both go through `entry_addresses`, the one
address function (`PageLayout.addresses`). The buffer is deliberately flat bytes: there is no
`[num_blocks, B, entry_bytes]` view to misread (field-notes §3). `PagedKVCache` and
`PagedIndexerKeyCache` pick the codec and validate the mode; everything else is here.

Torch reference implementation: vectorised gathers/scatters over byte offsets, any device.
"""

from __future__ import annotations

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
