"""MXFP4 weights (the release's routed experts): packed E2M1 codes + one UE8M0 scale per 32 columns.

`W[i, c] = e2m1(code[i, c]) * 2^(scales[i, c // 32] - 127)` (spec §6.6); codes are packed two per
byte (low nibble = even column, see `packing.py`), so a row of `in` values is ceil(in/2) bytes and
ceil(in/32) scale bytes. `in` need not be a multiple of 32 or even; the logical column count
travels as `num_cols`.

Scale rule: `2^ceil(log2(max(amax, amax_floor) / 6))`. amax floor: 6 * 2^-126 by default (the
reference `fp4_act_quant` floor): it is the smallest amax whose scale, 2^-126 (byte 1), is a
normal float32, so an all-zero group gets byte 1 rather than an exponent that underflows.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from mxserve.formats.blocks import cdiv
from mxserve.formats.bytes_view import as_uint8_bytes
from mxserve.formats.codec import decode, encode
from mxserve.formats.descriptor import E2M1
from mxserve.formats.packing import pack_e2m1_unchecked, packed_cols, unpack_e2m1
from mxserve.formats.pow2 import pow2_ceil_exponent, ue8m0_byte, ue8m0_value

MX_GROUP = 32
MXFP4_BLOCK = (1, MX_GROUP)
MXFP4_AMAX_FLOOR = 6.0 * 2.0**-126


def group_amax(x: torch.Tensor, group: int = MX_GROUP) -> torch.Tensor:
    """max |x| over each group of `group` columns of the last dim: [..., n] -> [..., ceil(n/group)]."""
    n = x.shape[-1]
    a = F.pad(x.to(torch.float32).abs(), (0, cdiv(n, group) * group - n))
    a = a.reshape(*x.shape[:-1], cdiv(n, group), group)
    return a.amax(dim=-1) if a.numel() else a.new_zeros(a.shape[:-1])


def expand_groups(per_group: torch.Tensor, num_cols: int, group: int = MX_GROUP) -> torch.Tensor:
    """[..., g] -> [..., num_cols], each group's value repeated over its columns."""
    return per_group.repeat_interleave(group, dim=-1)[..., :num_cols]


def quantize_mxfp4(
    w: torch.Tensor, amax_floor: float = MXFP4_AMAX_FLOOR, validate: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """Float [..., in] -> (packed uint8 [..., ceil(in/2)], scales uint8 UE8M0 [..., ceil(in/32)]).

    Raises ValueError on non-finite input. `validate=False` (per-step callers such as the
    indexer-key writer) skips that check and its host sync; non-finite input then gives
    unspecified codes (its group's scale byte is 254).
    """
    if w.dim() < 1 or not w.is_floating_point():
        raise ValueError(f"quantize_mxfp4 needs a float tensor [..., in], got {w.dtype=} {tuple(w.shape)=}")
    if validate and w.numel() and not bool(torch.isfinite(w).all()):
        raise ValueError("quantize_mxfp4: weights contain inf or NaN")
    num_cols = w.shape[-1]
    scale_bytes = ue8m0_byte(pow2_ceil_exponent(group_amax(w), E2M1.max_finite, amax_floor))
    work = torch.float64 if w.dtype == torch.float64 else torch.float32
    scale = expand_groups(ue8m0_value(scale_bytes, work), num_cols)
    return pack_e2m1_unchecked(encode(w.to(work) / scale, E2M1, validate=False)), scale_bytes


def check_mxfp4_shapes(packed: torch.Tensor, scales: torch.Tensor, num_cols: int) -> None:
    """Raise ValueError unless packed is [..., ceil(n/2)] and scales [..., ceil(n/32)] for n = num_cols."""
    if packed.dim() < 1:
        raise ValueError(f"MXFP4 packed codes must be [..., ceil(in/2)], got {tuple(packed.shape)=}")
    expected_packed = (*packed.shape[:-1], packed_cols(num_cols))
    expected_scales = (*packed.shape[:-1], cdiv(num_cols, MX_GROUP))
    if tuple(packed.shape) != expected_packed or tuple(scales.shape) != expected_scales:
        raise ValueError(
            f"MXFP4 shapes do not fit {num_cols=}: packed {tuple(packed.shape)} (expected "
            f"{expected_packed}), scales {tuple(scales.shape)} (expected {expected_scales})"
        )


def dequantize_mxfp4(
    packed: torch.Tensor,
    scales: torch.Tensor,
    dtype: torch.dtype = torch.float32,
    num_cols: int | None = None,
) -> torch.Tensor:
    """packed [..., ceil(n/2)] + UE8M0 scales [..., ceil(n/32)] -> values [..., n] in `dtype`.

    n = `num_cols`, default 2 * packed.shape[-1]. Inputs may be uint8 or one-byte dtypes
    (int8 / float4_e2m1fn_x2 / float8_e8m0fnu, reinterpreted). Product in float32, then cast.
    """
    packed, scales = as_uint8_bytes(packed), as_uint8_bytes(scales)
    if num_cols is None:
        num_cols = 2 * packed.shape[-1] if packed.dim() else 0
    check_mxfp4_shapes(packed, scales, num_cols)
    values = decode(unpack_e2m1(packed, num_cols), E2M1) * expand_groups(ue8m0_value(scales), num_cols)
    return values.to(dtype)
