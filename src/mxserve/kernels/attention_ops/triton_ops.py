"""Launchers of the fused norm/RoPE/cache-insert kernels: validate, pick launch parameters, launch.

Contracts equal the torch twins in `mxserve.model.fused_ref` (same arguments, same results; the
tests check the cache bytes bit for bit). Triton is imported here, so importing this module
requires it; the model reaches it only through a KernelSet built by the attention chooser.
"""

from __future__ import annotations

import torch
import triton

from mxserve.kernels.attention_ops._compressor_pool_kernel import _compressor_pool_kernel
from mxserve.kernels.attention_ops._norm_rope_kernels import _head_norm_rope_kernel, _kv_insert_kernel
from mxserve.kernels.attention_ops.cache_args import EntryMode, cache_args
from mxserve.kernels.cache import CompressorStateCache, PagedCache
from mxserve.kernels.cache._bytes import check_unique_slots
from mxserve.kernels.early_start import early_start_launch
from mxserve.kernels.triton_switch import interpreting

_FLOAT_DTYPES = (torch.float32, torch.bfloat16)

# compressor pooling tile: rows streamed per step x channels per program (fp64: 16 x 64 is 8 values
# per thread of 4 warps for each of the value and logit tiles)
POOL_CHUNK_ROWS = 16
POOL_BLOCK_C = 64


def _launch_opts() -> dict:
    # The twins never fuse a*b+c into an FMA; the interpreter cannot (and does not accept the flag).
    # Every kernel of this module waits first when launched early (kernels/early_start.py).
    return {} if interpreting() else {"enable_fp_fusion": False, **early_start_launch()}


def _check_rows(x: torch.Tensor, positions: torch.Tensor, inv_freq: torch.Tensor, what: str) -> None:
    if x.dtype not in _FLOAT_DTYPES:
        raise ValueError(f"{what}: dtype must be fp32 or bf16, got {x.dtype=}")
    if positions.shape != (x.shape[0],) or positions.dtype != torch.int64:
        raise ValueError(f"{what}: positions must be int64 [{x.shape[0]}], got {positions.dtype} {tuple(positions.shape)}")
    rope_dim = 2 * inv_freq.numel()
    if rope_dim > x.shape[-1] or x.shape[-1] % 2:
        raise ValueError(f"{what}: head dim {x.shape[-1]} must be even and >= rope dim {rope_dim}")
    if x.stride(-1) != 1:
        raise ValueError(f"{what}: the last dim must be contiguous, got {x.stride()=}")


def _block_pairs(head_dim: int) -> int:
    return triton.next_power_of_2(head_dim) // 2


def _head_rows(x: torch.Tensor, positions: torch.Tensor, inv_freq: torch.Tensor, eps: float, *,
               norm: bool, inverse: bool, what: str, out_dtype: torch.dtype | None = None) -> torch.Tensor:
    _check_rows(x, positions, inv_freq, what)
    out_dtype = x.dtype if out_dtype is None else out_dtype
    if out_dtype not in _FLOAT_DTYPES or (out_dtype != x.dtype and x.dtype != torch.float32):
        raise ValueError(f"{what}: out_dtype {out_dtype} must be x's dtype or bf16/fp32 for fp32 x, got {x.dtype=}")
    rows = x.reshape(x.shape[0], -1, x.shape[-1])  # [T, H, d]; a view for the usual layouts
    out = torch.empty(rows.shape, dtype=out_dtype, device=x.device)
    if rows.numel():
        # -- launch parameters: a few heads per program (fewer programs; the interpreter's cost is per program)
        block_h = min(triton.next_power_of_2(rows.shape[1]), 16 if interpreting() else 4)
        _head_norm_rope_kernel[(rows.shape[0], triton.cdiv(rows.shape[1], block_h))](
            rows, out, positions, inv_freq.to(device=x.device, dtype=torch.float32).contiguous(), rows.shape[1],
            rows.stride(0), rows.stride(1), out.stride(0), out.stride(1), eps,
            HEAD_DIM=x.shape[-1], BLOCK_P=_block_pairs(x.shape[-1]), BLOCK_H=block_h, ROPE_PAIRS=inv_freq.numel(),
            DO_NORM=norm, INVERSE=inverse, OUT_BF16=out_dtype == torch.bfloat16, ROUND_IN=out_dtype != x.dtype,
            **_launch_opts(),
        )
    return out.view(x.shape)


def q_norm_rope_triton(q: torch.Tensor, positions: torch.Tensor, inv_freq: torch.Tensor, eps: float) -> torch.Tensor:
    """Per-head unweighted RMS then RoPE: q [T, H, d] (fp32/bf16) → same shape and dtype."""
    return _head_rows(q, positions, inv_freq, eps, norm=True, inverse=False, what="q_norm_rope")


def rope_triton(x: torch.Tensor, positions: torch.Tensor, inv_freq: torch.Tensor, *, inverse: bool = False,
                out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """RoPE (or inverse RoPE) of the last 2*len(inv_freq) channels: x [T, ..., d] → same shape, in
    `out_dtype` (fp32 x rounded to it first, inside the launch) or x's dtype."""
    return _head_rows(x, positions, inv_freq, 0.0, norm=False, inverse=inverse, what="rope", out_dtype=out_dtype)


def _check_slots(cache: PagedCache, slots: torch.Tensor, n: int, what: str) -> None:
    if slots.shape != (n,) or slots.dtype != torch.int64:
        raise ValueError(f"{what}: slots must be int64 [{n}], got {slots.dtype} {tuple(slots.shape)}")
    cache.layout.check_slots(slots)
    check_unique_slots(slots)  # same rule as the torch writer: a duplicate is an upstream bug


def kv_insert_triton(kv: torch.Tensor, weight: torch.Tensor, eps: float, positions: torch.Tensor,
                     inv_freq: torch.Tensor, cache: PagedCache, slots: torch.Tensor) -> None:
    """Window KV: rms_norm(kv; weight) → RoPE at positions → encode → insert at slots (−1 skipped).

    kv [T, d] fp32/bf16 (the stream dtype: the twin rounds to it after the norm and the RoPE).
    """
    _check_rows(kv, positions, inv_freq, "kv_insert")
    args = cache_args(cache)
    if kv.dim() != 2 or kv.shape[1] != args.head_dim:
        raise ValueError(f"kv_insert: kv must be [T, {args.head_dim}], got {tuple(kv.shape)}")
    _check_slots(cache, slots, kv.shape[0], "kv_insert")
    if kv.shape[0] == 0:
        return
    _kv_insert_kernel[(kv.shape[0],)](
        kv, weight.contiguous(), positions, slots, inv_freq.to(device=kv.device, dtype=torch.float32).contiguous(),
        args.buffer, args.block_size, args.stride, kv.stride(0), eps,
        HEAD_DIM=args.head_dim, BLOCK_P=_block_pairs(args.head_dim), ROPE_PAIRS=inv_freq.numel(),
        OUT_BF16=kv.dtype == torch.bfloat16, MODE=int(args.mode), DATA_BYTES=args.data_bytes,
        SCALE_BYTES=args.scale_bytes, **_launch_opts(),
    )


def compressor_pool_triton(
    state_cache: CompressorStateCache, row_slots: torch.Tensor, entry_slots: torch.Tensor, *, ratio: int,
    overlap: bool, head_dim: int, round_to_bf16: bool,
) -> torch.Tensor:
    """Step 1 of the emit: per token t with entry_slots[t] >= 0, the fp32 softmax pooling of its R
    state rows (row_slots[t], −1 = absent), BF16-rounded if asked: pooled [T, head_dim] fp32.
    Rows of tokens with entry_slots[t] < 0 are left unwritten (uninitialised memory): no host sync
    picks the emitting tokens, their programs just return. R = 2*ratio (overlap) or ratio."""
    width = (2 if overlap else 1) * head_dim
    rows_r = (2 if overlap else 1) * ratio
    n = entry_slots.shape[0]
    if entry_slots.shape != (n,) or entry_slots.dtype != torch.int64:
        raise ValueError(f"compressor_pool: entry_slots must be int64 [T], got {entry_slots.dtype} "
                         f"{tuple(entry_slots.shape)}")
    if state_cache.row_width != 2 * width:
        raise ValueError(f"compressor_pool: state rows are {state_cache.row_width} wide, need 2*{width}")
    if row_slots.shape != (n, rows_r) or row_slots.dtype != torch.int64:
        raise ValueError(f"compressor_pool: row_slots must be int64 [{n}, {rows_r}], got "
                         f"{row_slots.dtype} {tuple(row_slots.shape)}")
    if state_cache.block_stride_bytes % 4:
        raise ValueError(f"compressor_pool: state page stride {state_cache.block_stride_bytes} is not a multiple of 4")
    state_cache.layout.check_slots(row_slots)
    pooled = torch.empty(n, head_dim, device=row_slots.device, dtype=torch.float32)
    if n == 0:
        return pooled
    # -- launch parameters: the working set is CHUNK_R x BLOCK_C fp64 per program, whatever R is
    chunk_r = min(triton.next_power_of_2(rows_r), POOL_CHUNK_ROWS)
    block_c = min(triton.next_power_of_2(head_dim), POOL_BLOCK_C)
    _compressor_pool_kernel[(n, triton.cdiv(head_dim, block_c))](
        state_cache.buffer.view(torch.float32), row_slots.contiguous(), entry_slots, pooled,
        state_cache.block_size, state_cache.row_width, state_cache.block_stride_bytes // 4,
        R=rows_r, M=ratio, OVERLAP=overlap, WIDTH=width, HEAD_DIM=head_dim, CHUNK_R=chunk_r, BLOCK_C=block_c,
        ROUND_BF16=round_to_bf16, **_launch_opts(),
    )
    return pooled


def compressor_emit_triton(
    state_cache: CompressorStateCache, row_slots: torch.Tensor, entry_slots: torch.Tensor,
    entry_positions: torch.Tensor, *, ratio: int, overlap: bool, norm_weight: torch.Tensor, eps: float,
    inv_freq: torch.Tensor, out_dtype: torch.dtype, round_pooled_to_bf16: bool, entry_cache: PagedCache,
) -> None:
    """Emit compressed entries: per token t with entry_slots[t] >= 0, pool its R state rows
    (row_slots[t], −1 = absent), bf16-round (if asked), cast to out_dtype, RMS-norm, RoPE at
    entry_positions[t], encode and insert at entry_slots[t]. R = 2*ratio (overlap) or ratio.

    Two launches (issue 11): the pooling over (token, channel block) programs streaming the rows,
    then the window-KV insert kernel on the pooled rows; tokens that emit nothing return at once
    in both, and nothing here reads a device value on the host (it runs inside the decode graph).
    """
    args = cache_args(entry_cache)
    n = entry_slots.shape[0]
    if entry_positions.shape != (n,) or entry_positions.dtype != torch.int64:
        raise ValueError(f"compressor_emit: entry_positions must be int64 [{n}], got {tuple(entry_positions.shape)}")
    if out_dtype not in _FLOAT_DTYPES:
        raise ValueError(f"compressor_emit: out_dtype must be fp32 or bf16, got {out_dtype}")
    _check_slots(entry_cache, entry_slots, n, "compressor_emit")
    if args.mode is EntryMode.DS_MLA and args.head_dim != 512:
        raise ValueError(f"compressor_emit: fp8_ds_mla entries are 512-dim, got {args.head_dim}")
    # Pooled rows already hold the stream dtype's values: BF16-rounded when either rounding applies
    # (the twin's bf16 round then cast to out_dtype; rounding to BF16 twice is rounding once).
    round_to_bf16 = round_pooled_to_bf16 or out_dtype == torch.bfloat16
    pooled = compressor_pool_triton(state_cache, row_slots, entry_slots, ratio=ratio, overlap=overlap,
                                    head_dim=args.head_dim, round_to_bf16=round_to_bf16)
    if n == 0:
        return
    # RMS norm, RoPE at the window's first position, encode, insert; it skips the slot −1 rows, so
    # the unwritten pooled rows are never read.
    _kv_insert_kernel[(n,)](
        pooled, norm_weight.contiguous(), entry_positions, entry_slots,
        inv_freq.to(device=row_slots.device, dtype=torch.float32).contiguous(), args.buffer, args.block_size,
        args.stride, pooled.stride(0), eps,
        HEAD_DIM=args.head_dim, BLOCK_P=_block_pairs(args.head_dim), ROPE_PAIRS=inv_freq.numel(),
        OUT_BF16=out_dtype == torch.bfloat16, MODE=int(args.mode), DATA_BYTES=args.data_bytes,
        SCALE_BYTES=args.scale_bytes, **_launch_opts(),
    )
