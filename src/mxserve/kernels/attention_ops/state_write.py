"""Launcher of the compressor state-row write (`_state_write_kernel.py`): validate, launch.

Contract: `fused_ref.compressor_state_write_ref` (same arguments, same cache bytes; the tests
compare them bit for bit on pages with odd strides and slot -1 padding).
"""

from __future__ import annotations

import torch
import triton

from mxserve.kernels.attention_ops._state_write_kernel import _compressor_state_write_kernel
from mxserve.kernels.cache import CompressorStateCache
from mxserve.kernels.cache._bytes import check_unique_slots
from mxserve.kernels.early_start import early_start_launch

# channels per program: a row half is c*d = 256..1024 fp32 words, so 1-4 programs per token
BLOCK_C = 256


def compressor_state_write_triton(
    state_cache: CompressorStateCache, slots: torch.Tensor, a: torch.Tensor, z: torch.Tensor,
    ape: torch.Tensor, positions: torch.Tensor, ratio: int,
) -> None:
    """Store fp32 rows [a_t | z_t + ape[p_t mod ratio]] at slots[t] (−1 skipped).

    a, z: fp32 [T, W] (last dim contiguous); ape fp32 [ratio, W]; positions int64 [T] (>= 0);
    slots int64 [T]; the cache's rows are 2W wide. Raises ValueError naming the bad argument."""
    n = slots.shape[0]
    width = state_cache.row_width // 2
    for name, t in (("a", a), ("z", z)):
        if t.dtype != torch.float32 or t.shape != (n, width) or (n and t.stride(-1) != 1):
            raise ValueError(f"compressor_state_write: {name} must be fp32 [{n}, {width}] with a contiguous last "
                             f"dim, got {t.dtype} {tuple(t.shape)} {t.stride()=}")
    if ape.shape != (ratio, width):
        raise ValueError(f"compressor_state_write: ape must be [{ratio}, {width}], got {tuple(ape.shape)}")
    for name, t in (("slots", slots), ("positions", positions)):
        if t.dtype != torch.int64 or t.shape != (n,):
            raise ValueError(f"compressor_state_write: {name} must be int64 [{n}], got {t.dtype} {tuple(t.shape)}")
    if state_cache.block_stride_bytes % 4:
        raise ValueError(f"compressor_state_write: state page stride {state_cache.block_stride_bytes} is not a "
                         "multiple of 4 (fp32 words)")
    state_cache.layout.check_slots(slots)
    check_unique_slots(slots)  # the writer's rule: one row per slot per call
    if n == 0:
        return
    ape = ape.to(dtype=torch.float32).contiguous()
    _compressor_state_write_kernel[(n, triton.cdiv(width, BLOCK_C))](
        a, z, ape, positions, slots, state_cache.buffer.view(torch.float32), a.stride(0), z.stride(0), ratio,
        state_cache.block_size, state_cache.row_width, state_cache.block_stride_bytes // 4,
        WIDTH=width, BLOCK_C=BLOCK_C, **early_start_launch(),
    )
