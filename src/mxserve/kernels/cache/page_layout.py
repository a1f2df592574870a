"""The byte address math of a split paged cache: the one function writers and readers share.

A page (block) holds `block_size` entries. Each entry has `data_bytes` of payload and
`scale_bytes` of scale metadata, and a page stores them *split*, not interleaved:

```
page base + 0                      : entry 0 data | entry 1 data | ... | entry B-1 data
page base + B*data_bytes           : entry 0 scales | entry 1 scales | ... | entry B-1 scales
page base + B*(data+scale) .. stride-1 : padding (never written)
```

This is spec §8.1 (`fp8_ds_mla`: data 576, scales 8) and §8.2 (FP8 indexer keys: data 128,
scales 4). Plain-row caches (BF16/FP32 rows) are the degenerate case `scale_bytes == 0`.
The page stride comes from whoever owns the memory and may be larger than one page's bytes.

`PageLayout.addresses` is the only place that turns a global slot (`block_id*B + pos`) into
byte offsets. Everything that touches cache bytes (the torch writer/reader here, later Triton
kernels, tests) goes through it or restates it in a comment next to a test that pins it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

INVALID_SLOT = -1  # padding lanes / non-existent entries: writes skip them, reads return zeros


def round_up(value: int, multiple: int) -> int:
    """Smallest multiple of `multiple` that is >= `value` (both positive ints)."""
    return -(-value // multiple) * multiple



def value_checks_enabled(slots: torch.Tensor) -> bool:
    """Whether slot-value checks (a host read-back) run for these slots: always on the CPU; on a
    GPU only with MXSERVE_CHECK_SLOTS=1 (see `PageLayout.check_slots`)."""
    return not slots.is_cuda or os.environ.get("MXSERVE_CHECK_SLOTS", "0") == "1"

@dataclass(frozen=True)
class PageLayout:
    """Address math of `num_blocks` pages of `block_size` split entries (see module doc).

    Offsets are byte offsets from the start of the cache's flat uint8 buffer; page `b` starts at
    `b * block_stride_bytes`. Raises ValueError for non-positive sizes or a stride smaller than
    one page's bytes.
    """

    num_blocks: int
    block_size: int  # B: entries per page
    data_bytes: int  # payload bytes per entry
    scale_bytes: int  # scale bytes per entry (0 = plain rows, no scale region)
    block_stride_bytes: int  # distance between page starts, >= block_size * entry_bytes

    def __post_init__(self) -> None:
        if self.num_blocks < 0:
            raise ValueError(f"num_blocks must be >= 0, got {self.num_blocks=}")
        if self.block_size <= 0:
            raise ValueError(f"block_size must be > 0, got {self.block_size=}")
        if self.data_bytes <= 0 or self.scale_bytes < 0:
            raise ValueError(f"bad entry sizes: {self.data_bytes=}, {self.scale_bytes=}")
        if self.block_stride_bytes < self.block_bytes:
            raise ValueError(
                f"block stride {self.block_stride_bytes=} is smaller than one page's bytes "
                f"(block_size {self.block_size} x {self.entry_bytes} B = {self.block_bytes})"
            )

    @property
    def entry_bytes(self) -> int:
        """Logical bytes of one entry (data + scales), e.g. 584 for fp8_ds_mla."""
        return self.data_bytes + self.scale_bytes

    @property
    def block_bytes(self) -> int:
        """Bytes of one page that hold entries (the rest of the stride is padding)."""
        return self.block_size * self.entry_bytes

    @property
    def num_slots(self) -> int:
        return self.num_blocks * self.block_size

    @property
    def buffer_bytes(self) -> int:
        """Bytes a buffer needs: every page's full stride (the last page's padding included)."""
        return self.num_blocks * self.block_stride_bytes

    def check_slots(self, slots: torch.Tensor) -> None:
        """Raise ValueError unless `slots` is an integer tensor with values in [-1, num_slots).

        The value check reads the slots back to the host, so on a GPU it would cost one sync per
        kernel launch and make the decode step impossible to capture in a CUDA graph. GPU tensors
        therefore get the dtype check only, unless MXSERVE_CHECK_SLOTS=1 (debugging, eager only):
        the engine's slot math is checked on the CPU paths in CI and by `mxserve verify`."""
        if slots.dtype.is_floating_point or slots.dtype == torch.bool or slots.is_complex():
            raise ValueError(f"slots must be an integer tensor, got {slots.dtype=}")
        if not value_checks_enabled(slots):
            return
        bad = (slots < INVALID_SLOT) | (slots >= self.num_slots)
        if bool(bad.any()):
            first = slots[bad].flatten()[0].item()
            raise ValueError(
                f"slot {first} out of range [-1, {self.num_slots}) ({self.num_blocks=}, {self.block_size=})"
            )

    def addresses(self, slots: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Byte offsets of each slot's data and scale groups.

        slots: int tensor, any shape, global slot ids `block_id * block_size + pos`, -1 = invalid.
        Returns (data_offsets, scale_offsets), int64, same shape and device as `slots`:
          data(slot)  = block_id * stride + pos * data_bytes
          scale(slot) = block_id * stride + block_size * data_bytes + pos * scale_bytes
        Both are -1 where slot == -1. With scale_bytes == 0 the scale offsets point at the
        (empty) scale region and must not be dereferenced. Raises ValueError for out-of-range slots.
        """
        self.check_slots(slots)
        slots = slots.to(torch.int64)
        block_id = torch.div(slots, self.block_size, rounding_mode="floor")
        pos = slots - block_id * self.block_size
        page = block_id * self.block_stride_bytes
        data = page + pos * self.data_bytes
        scale = page + self.block_size * self.data_bytes + pos * self.scale_bytes
        invalid = slots == INVALID_SLOT
        return data.masked_fill(invalid, -1), scale.masked_fill(invalid, -1)
