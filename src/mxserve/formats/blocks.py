"""Block grids: how a tensor's last two dims split into (possibly partial) scale blocks.

Shared by the block-FP8 and MXFP4 quantizers and by the FP4->FP8 repack. Edge blocks may be
partial (shapes that are not multiples of the block); their padding is zero, which never raises a
block's amax, and is cut off again when a per-block scale is expanded back to elements.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def block_grid(shape: tuple[int, int], block: tuple[int, int]) -> tuple[int, int]:
    """Number of (row, column) blocks covering a [rows, cols] matrix: ceil division."""
    return cdiv(shape[0], block[0]), cdiv(shape[1], block[1])


def check_block(block: tuple[int, int]) -> tuple[int, int]:
    if len(block) != 2 or any(int(b) < 1 for b in block):
        raise ValueError(f"block must be two positive ints, got {block=}")
    return int(block[0]), int(block[1])


def block_amax(x: torch.Tensor, block: tuple[int, int]) -> torch.Tensor:
    """max |x| over each block of the last two dims: [..., rows, cols] -> [..., gr, gc] (float32)."""
    rows, cols = x.shape[-2:]
    br, bc = block
    gr, gc = block_grid((rows, cols), block)
    a = x.to(torch.float32).abs()
    a = F.pad(a, (0, gc * bc - cols, 0, gr * br - rows))
    a = a.reshape(*x.shape[:-2], gr, br, gc, bc)
    return a.amax(dim=(-3, -1)) if a.numel() else a.new_zeros((*x.shape[:-2], gr, gc))


def expand_blocks(per_block: torch.Tensor, block: tuple[int, int], shape: tuple[int, int]) -> torch.Tensor:
    """Inverse of the grid: [..., gr, gc] -> [..., rows, cols], each block value repeated over its block."""
    rows, cols = shape
    out = per_block.repeat_interleave(block[0], dim=-2)[..., :rows, :]
    return out.repeat_interleave(block[1], dim=-1)[..., :cols]
