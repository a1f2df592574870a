"""Packing E2M1 codes two per byte: low nibble = even column (2k), high nibble = odd column (2k+1).

This is the release checkpoint's layout (spec §6.6) and `torch.float4_e2m1fn_x2`'s. An odd number
of columns packs with a zero code (+0.0) in the last high nibble, so the logical column count has
to travel with the packed tensor (`num_cols`).
"""

from __future__ import annotations

import torch

from mxserve.formats.bytes_view import as_uint8_bytes


def packed_cols(num_cols: int) -> int:
    """Bytes per row for `num_cols` E2M1 codes."""
    return (num_cols + 1) // 2


def pack_e2m1_unchecked(codes: torch.Tensor) -> torch.Tensor:
    """`pack_e2m1` without the value check (callers that built the codes themselves)."""
    if codes.shape[-1] % 2:
        codes = torch.nn.functional.pad(codes, (0, 1))
    return codes[..., 0::2] | (codes[..., 1::2] << 4)


def pack_e2m1(codes: torch.Tensor) -> torch.Tensor:
    """uint8 [..., n] codes (each < 16) -> uint8 [..., ceil(n/2)] packed bytes.

    Raises ValueError if a code has high bits set (a sign the input is not E2M1 codes).
    """
    codes = as_uint8_bytes(codes)
    if codes.dim() == 0:
        raise ValueError("pack_e2m1 needs at least one dimension (the packed one)")
    if codes.numel() and bool((codes > 0xF).any()):
        raise ValueError(f"E2M1 codes must be < 16; got max code {int(codes.max())}")
    return pack_e2m1_unchecked(codes)


def unpack_e2m1(packed: torch.Tensor, num_cols: int | None = None) -> torch.Tensor:
    """uint8 [..., k] packed bytes -> uint8 [..., num_cols] codes (num_cols defaults to 2k).

    `num_cols` must be 2k or 2k - 1 (the odd case drops the padding nibble).
    """
    packed = as_uint8_bytes(packed)
    if packed.dim() == 0:
        raise ValueError("unpack_e2m1 needs at least one dimension (the packed one)")
    k = packed.shape[-1]
    if num_cols is None:
        num_cols = 2 * k
    if packed_cols(num_cols) != k or num_cols < 0:
        raise ValueError(f"{num_cols=} does not fit {k} packed bytes per row (needs 2k or 2k-1)")
    codes = torch.stack((packed & 0xF, packed >> 4), dim=-1).reshape(*packed.shape[:-1], 2 * k)
    return codes[..., :num_cols]
