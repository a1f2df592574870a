"""Byte-level gather/scatter on a flat uint8 cache buffer, and the write-batch slot checks.

Private helpers shared by the paged caches: they move whole byte runs at offsets computed by
`PageLayout.addresses`, vectorised (one index tensor, no per-entry Python loop). They know
nothing about what the bytes mean.
"""

from __future__ import annotations

import torch

from mxserve.kernels.cache.page_layout import INVALID_SLOT, value_checks_enabled


def _word_view(buffer: torch.Tensor, offsets: torch.Tensor, width: int,
               align: int | None = None) -> tuple[torch.Tensor, int]:
    """The widest integer view (8/4/2/1 bytes) whose words tile every requested byte run.

    Moving 8-byte words instead of single bytes cuts the index tensors 8x; the bytes moved are
    the same, so the result is bit-identical to a byte-wise gather. `align`: a divisor of every
    offset the caller guarantees (from the page layout); without it the offsets are checked,
    which reads them back to the host (a sync on a GPU).
    """
    for word, dtype in ((8, torch.int64), (4, torch.int32), (2, torch.int16)):
        if width % word or buffer.numel() % word:
            continue
        if (align % word == 0) if align is not None else bool((offsets % word == 0).all()):
            return buffer.view(dtype), word
    return buffer, 1


def gather_bytes(buffer: torch.Tensor, offsets: torch.Tensor, width: int, align: int | None = None) -> torch.Tensor:
    """Bytes `buffer[o : o + width]` for each offset o.

    buffer: uint8 [num_bytes] (flat). offsets: int64 [N], all valid (>= 0). `align`: see `_word_view`.
    Returns a fresh contiguous uint8 [N, width] (so callers may `.view()` it as wider dtypes).
    """
    words, word = _word_view(buffer, offsets, width, align)
    index = (offsets // word)[:, None] + torch.arange(width // word, device=buffer.device, dtype=torch.int64)
    return words[index].view(torch.uint8).reshape(offsets.shape[0], width)


def scatter_bytes(buffer: torch.Tensor, offsets: torch.Tensor, values: torch.Tensor, align: int | None = None) -> None:
    """Write `values[i]` (uint8 [N, width]) to `buffer[offsets[i] : offsets[i] + width]` in place.

    Offsets must be valid, and byte runs that overlap must carry identical bytes (distinct slots
    never overlap; the sync-free writer repeats one row on purpose). `align`: see `_word_view`.
    """
    width = values.shape[-1]
    words, word = _word_view(buffer, offsets, width, align)
    index = (offsets // word)[:, None] + torch.arange(width // word, device=buffer.device, dtype=torch.int64)
    payload = values.contiguous().view(words.dtype) if word > 1 else values
    words.index_put_((index.reshape(-1),), payload.reshape(-1))


def check_unique_slots(slots: torch.Tensor) -> None:
    """Raise ValueError if a valid slot (!= -1) occurs more than once in one write.

    Why an error and not last-writer-wins: a duplicate slot in one batch is always an upstream
    bug (the same position inserted twice, spec §12 item 20), and a parallel GPU writer cannot
    order duplicate writes cheaply. Overwriting a slot in a *later* write call is fine.
    """
    if not value_checks_enabled(slots):  # a host read-back; see PageLayout.check_slots
        return
    valid = slots[slots != INVALID_SLOT]
    if valid.numel() < 2:
        return
    uniq, counts = torch.unique(valid, return_counts=True)
    if bool((counts > 1).any()):
        dup = uniq[counts > 1][0].item()
        raise ValueError(f"slot {dup} is written more than once in one write call (duplicates are an error)")
