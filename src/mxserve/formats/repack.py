"""The lossless MXFP4 -> block-FP8 repack of spec §6.6 (official `convert.py`, `expert_dtype=fp8`).

Per 128x128 tile, the tile scale is T = (largest group scale in the tile) / 2^6, and each element
becomes e2m1_value * (S_group / T) stored as e4m3fn. With S_group / T = 2^d, d <= 6 the largest
magnitude is 6 * 64 = 384 < 448; for d >= -8 every E2M1 value times 2^d is an e4m3fn value
(0.5 * 2^-8 = 2^-9 is e4m3fn's smallest subnormal), so the repack is exact. A group with non-zero
codes that would need d < -8 would lose bits: that raises ValueError naming the tile. All-zero
groups are exact at any d. Tile scale bytes below 0 (group scales all under 2^-121) clamp to 0,
which only shrinks d.
"""

from __future__ import annotations

import torch

from mxserve.formats.blocks import block_grid, expand_blocks
from mxserve.formats.bytes_view import as_uint8_bytes
from mxserve.formats.codec import decode, encode
from mxserve.formats.descriptor import E2M1, E4M3FN
from mxserve.formats.mxfp4 import MX_GROUP, check_mxfp4_shapes
from mxserve.formats.packing import unpack_e2m1
from mxserve.formats.pow2 import exp2_int

REPACK_TILE = 128
_HEADROOM_EXP = 6  # 6 * 2^6 = 384 <= 448
_MIN_RATIO_EXP = -8  # 0.5 * 2^-8 = 2^-9, e4m3fn's smallest subnormal


def mxfp4_to_fp8_block(
    packed: torch.Tensor, scales: torch.Tensor, num_cols: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """MXFP4 [out, ceil(in/2)] + [out, ceil(in/32)] -> (e4m3fn codes [out, in], UE8M0 [ceil(out/128), ceil(in/128)]).

    `dequantize_fp8_block` of the result equals `dequantize_mxfp4` of the input bit for bit.
    Raises ValueError on NaN scale bytes and on tiles whose scale spread would lose bits.
    """
    packed, scales = as_uint8_bytes(packed), as_uint8_bytes(scales)
    if packed.dim() != 2:
        raise ValueError(f"mxfp4_to_fp8_block expects a 2-D weight, got {tuple(packed.shape)=}")
    if num_cols is None:
        num_cols = 2 * packed.shape[-1]
    check_mxfp4_shapes(packed, scales, num_cols)
    if bool((scales == 255).any()):
        raise ValueError("mxfp4_to_fp8_block: NaN (255) scale byte in input")
    rows = packed.shape[0]
    codes4 = unpack_e2m1(packed, num_cols)
    groups_per_tile = REPACK_TILE // MX_GROUP

    # tile max over the group-scale grid: rows in tiles of 128, groups in tiles of 4
    group_bytes = scales.to(torch.int32)
    tile_grid = block_grid((rows, scales.shape[1]), (REPACK_TILE, groups_per_tile))
    padded = torch.nn.functional.pad(
        group_bytes,
        (0, tile_grid[1] * groups_per_tile - scales.shape[1], 0, tile_grid[0] * REPACK_TILE - rows),
    )
    tile_max = padded.reshape(tile_grid[0], REPACK_TILE, tile_grid[1], groups_per_tile)
    tile_max = tile_max.amax(dim=(1, 3)) if tile_max.numel() else padded.new_zeros(tile_grid)
    tile_bytes = (tile_max - _HEADROOM_EXP).clamp(min=0)

    # d per group, and the lossless check (only groups holding a non-zero code can lose bits)
    d = group_bytes - expand_blocks(tile_bytes, (REPACK_TILE, groups_per_tile), tuple(scales.shape))
    nonzero = codes4 & 0x7 != 0
    group_has_value = torch.nn.functional.pad(nonzero, (0, scales.shape[1] * MX_GROUP - num_cols))
    group_has_value = group_has_value.reshape(rows, scales.shape[1], MX_GROUP).any(dim=-1)
    lossy = (d < _MIN_RATIO_EXP) & group_has_value
    if bool(lossy.any()):
        r, g = (int(i) for i in lossy.nonzero()[0])
        ti, tj = r // REPACK_TILE, g // groups_per_tile
        raise ValueError(
            f"MXFP4 -> FP8 repack would lose bits in tile ({ti}, {tj}) (rows {ti * REPACK_TILE}.., cols "
            f"{tj * REPACK_TILE}..): group scale byte {int(group_bytes[r, g])} at row {r}, group {g} is "
            f"{-int(d[r, g])} binades below the tile scale byte {int(tile_bytes[ti, tj])} "
            f"(max group byte {int(tile_max[ti, tj])} - 6); at most 8 fit"
        )
    ratio = exp2_int(d.clamp(min=_MIN_RATIO_EXP - 1))  # zero groups below -8 multiply zeros only
    values = decode(codes4, E2M1) * ratio.repeat_interleave(MX_GROUP, dim=-1)[:, :num_cols]
    return encode(values, E4M3FN), tile_bytes.to(torch.uint8)
