"""Triton kernels of `SlotRows`: copy each listed slot's stored bytes (data run, then scale run)
out of a cache buffer, and back in for the chosen rows. One program per (row, 1 KB piece of the
row's bytes); the page address math is the one of `PageLayout.addresses`, done in registers.
Byte moves only, so the results equal the torch twin's exactly."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _row_addresses(slots, row, piece, block_size, stride, DATA: tl.constexpr, SCALE: tl.constexpr,
                   BLOCK: tl.constexpr):
    """(byte offsets of this piece of the row's data || scale run, in-row mask, the row's slot is real)."""
    slot = tl.zeros([BLOCK], dtype=tl.int64) + tl.load(slots + row)  # a block, so the masks are blocks
    real = slot >= 0
    s = tl.maximum(slot, 0)
    block = s // block_size
    pos = s - block * block_size
    page = block * stride
    i = piece * BLOCK + tl.arange(0, BLOCK)
    in_row = i < DATA + SCALE
    in_data = i < DATA
    offset = tl.where(in_data, page + pos * DATA + i, page + block_size * DATA + pos * SCALE + (i - DATA))
    return offset, in_row, real


@triton.jit
def _save_rows_kernel(buffer, slots, out, block_size, stride, DATA: tl.constexpr, SCALE: tl.constexpr,
                      BLOCK: tl.constexpr):
    row, piece = tl.program_id(0), tl.program_id(1)
    offset, in_row, real = _row_addresses(slots, row, piece, block_size, stride, DATA, SCALE, BLOCK)
    values = tl.load(buffer + offset, mask=in_row & real, other=0)
    i = piece * BLOCK + tl.arange(0, BLOCK)
    tl.store(out + row.to(tl.int64) * (DATA + SCALE) + i, values, mask=in_row)


@triton.jit
def _restore_rows_kernel(buffer, slots, saved, chosen, block_size, stride, DATA: tl.constexpr,
                         SCALE: tl.constexpr, BLOCK: tl.constexpr):
    row, piece = tl.program_id(0), tl.program_id(1)
    offset, in_row, real = _row_addresses(slots, row, piece, block_size, stride, DATA, SCALE, BLOCK)
    take = (tl.zeros([BLOCK], dtype=tl.int32) + tl.load(chosen + row).to(tl.int32)) != 0
    i = piece * BLOCK + tl.arange(0, BLOCK)
    write = in_row & real & take
    values = tl.load(saved + row.to(tl.int64) * (DATA + SCALE) + i, mask=write, other=0)
    tl.store(buffer + offset, values, mask=write)
