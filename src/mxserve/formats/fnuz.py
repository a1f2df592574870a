"""Converting stored FP8 between OCP e4m3fn (the checkpoint) and FNUZ e4m3fnuz (AMD gfx942), spec §9.

The same bit pattern is worth exactly half as much in FNUZ (bias 8 vs 7), so a block-scaled tensor
converts losslessly by keeping the code bytes and doubling the scale (UE8M0 byte + 1). The only
code that changes is 0x80: -0 in OCP, the one NaN in FNUZ; it becomes 0x00. Anything that cannot be
converted exactly raises ValueError instead of silently producing NaN or a wrong scale.
"""

from __future__ import annotations

import torch

from mxserve.formats.bytes_view import as_uint8_bytes
from mxserve.formats.pow2 import UE8M0_MAX_FINITE_BYTE


def _first_where(mask: torch.Tensor) -> tuple[int, ...]:
    return tuple(int(i) for i in mask.nonzero()[0])


def _shift_scales(scales: torch.Tensor, delta: int) -> torch.Tensor:
    scales = as_uint8_bytes(scales)
    shifted = scales.to(torch.int32) + delta
    bad = (scales == 255) | (shifted < 0) | (shifted > UE8M0_MAX_FINITE_BYTE)
    if bool(bad.any()):
        at = _first_where(bad)
        raise ValueError(
            f"UE8M0 scale byte {int(scales[at])} at {at} cannot be shifted by {delta:+d} "
            f"(NaN byte, or the result leaves [0, {UE8M0_MAX_FINITE_BYTE}])"
        )
    return shifted.to(torch.uint8)


def fp8_ocp_to_fnuz(codes: torch.Tensor, scales: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """e4m3fn codes + UE8M0 scales -> e4m3fnuz codes + scales (byte + 1), dequantizing to equal values.

    Raises ValueError on OCP NaN codes (0x7F/0xFF, which would become +-240) and on scale bytes
    254/255 (no room to double / NaN).
    """
    codes = as_uint8_bytes(codes)
    nan = (codes & 0x7F) == 0x7F
    if bool(nan.any()):
        at = _first_where(nan)
        raise ValueError(f"OCP e4m3fn NaN code 0x{int(codes[at]):02X} at {at} has no FNUZ equivalent")
    new_scales = _shift_scales(scales, +1)
    return torch.where(codes == 0x80, torch.zeros_like(codes), codes), new_scales


def fp8_fnuz_to_ocp(codes: torch.Tensor, scales: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """e4m3fnuz codes + UE8M0 scales -> e4m3fn codes + scales (byte - 1), dequantizing to equal values.

    Raises ValueError on the FNUZ NaN code 0x80, on 0x7F/0xFF (+-240, whose bit pattern is NaN in
    OCP: 480 at half the scale exceeds e4m3fn's 448), and on scale bytes 0/255.
    """
    codes = as_uint8_bytes(codes)
    bad = (codes == 0x80) | ((codes & 0x7F) == 0x7F)
    if bool(bad.any()):
        at = _first_where(bad)
        raise ValueError(
            f"FNUZ code 0x{int(codes[at]):02X} at {at} has no OCP equivalent (0x80 is NaN; "
            "0x7F/0xFF are +-240, which would need 480 > 448 at half the scale)"
        )
    return codes.clone(), _shift_scales(scales, -1)
