"""Reinterpreting one-byte tensors as raw uint8 bytes, the one container mxserve stores codes in.

Checkpoints and other libraries hand us FP8 codes as `float8_e4m3fn`, packed FP4 as `int8` or
`float4_e2m1fn_x2`, and scales as `float8_e8m0fnu`. A numeric cast of those (`.to(torch.uint8)`)
changes the bytes (a numeric copy of an E8M0 2^-7 gives 0), so everything here is a `.view`.
"""

from __future__ import annotations

import torch

# The one-byte dtypes whose bytes are codes; bool is one byte too but is never a code container.
_BYTE_DTYPES: frozenset[torch.dtype] = frozenset(
    d
    for d in (
        torch.uint8,
        torch.int8,
        getattr(torch, "float8_e4m3fn", None),
        getattr(torch, "float8_e4m3fnuz", None),
        getattr(torch, "float8_e5m2", None),
        getattr(torch, "float8_e5m2fnuz", None),
        getattr(torch, "float8_e8m0fnu", None),
        getattr(torch, "float4_e2m1fn_x2", None),
    )
    if d is not None
)


def as_uint8_bytes(t: torch.Tensor) -> torch.Tensor:
    """Return `t`'s bytes as a uint8 view (no copy, same shape and strides).

    Raises ValueError for dtypes that are not one-byte code containers (a float32 tensor here is
    almost always a caller that meant to quantize, not reinterpret).
    """
    if t.dtype == torch.uint8:
        return t
    if t.dtype not in _BYTE_DTYPES:
        raise ValueError(f"expected a one-byte code tensor (uint8/int8/float8_*/float4_*), got {t.dtype=}")
    return t.view(torch.uint8)
