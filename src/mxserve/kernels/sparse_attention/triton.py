"""Launcher of the sparse-attention Triton kernel: validates, picks launch parameters, launches.

Same contract as `sparse_attention_ref` (q [T, H, d], up to two (cache, slots [T, K]) sources of
one KV encoding, sink [H], scale → fp32 [T, H, d]); the caches are read in their stored bytes
through their `PageLayout` numbers (`cache_args`). `inspect` (verification only) cannot see
inside a kernel: when given, the reference is run beside the kernel on the same caches to feed
it, and the kernel's output is returned.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

import torch
import triton

from mxserve.kernels.attention_ops.cache_args import EntryMode, cache_args
from mxserve.kernels.sparse_attention._sparse_attention_kernel import _sparse_attention_kernel
from mxserve.kernels.sparse_attention.reference import sparse_attention_ref


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def sparse_attention_triton(
    q: torch.Tensor,
    sources: Sequence[tuple[object, torch.Tensor]],
    sink: torch.Tensor,
    scale: float,
    inspect: Callable[[str, torch.Tensor], None] | None = None,
) -> torch.Tensor:
    """See `sparse_attention_ref`. Raises ValueError for > 2 sources, mixed encodings, bad shapes."""
    if q.dim() != 3 or q.dtype not in (torch.float32, torch.bfloat16):
        raise ValueError(f"sparse_attention: q must be fp32/bf16 [T, H, d], got {q.dtype} {tuple(q.shape)}")
    if not 1 <= len(sources) <= 2:
        raise ValueError(f"sparse_attention: 1 or 2 sources (window, compressed), got {len(sources)}")
    q = q if q.stride(-1) == 1 else q.contiguous()
    num_tokens, num_heads, head_dim = q.shape
    if sink.shape != (num_heads,):
        raise ValueError(f"sparse_attention: sink must be [{num_heads}], got {tuple(sink.shape)}")
    srcs = []
    for cache, slots in sources:
        args = cache_args(cache)
        if args.mode not in (EntryMode.DS_MLA, EntryMode.BF16, EntryMode.FP32):
            raise ValueError(f"sparse_attention: cache encoding {args.mode.name} is not a KV encoding")
        if args.head_dim != head_dim:
            raise ValueError(f"sparse_attention: cache head_dim {args.head_dim} != q head_dim {head_dim}")
        if slots.dim() != 2 or slots.shape[0] != num_tokens or slots.dtype != torch.int64:
            raise ValueError(f"sparse_attention: slots must be int64 [{num_tokens}, K], got {slots.dtype} "
                             f"{tuple(slots.shape)}")
        if slots.numel():
            cache.layout.check_slots(slots)
        srcs.append((args, slots.contiguous()))
    if len({a.mode for a, _ in srcs}) != 1:
        raise ValueError(f"sparse_attention: sources mix encodings {[a.mode.name for a, _ in srcs]}")
    if inspect is not None:
        sparse_attention_ref(q, sources, sink, scale, inspect=inspect)

    out = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    if num_tokens == 0:
        return out
    mode = srcs[0][0].mode
    # -- launch parameters -------------------------------------------------------------------
    if interpreting():
        dot, block_h, block_k, num_warps = 0, min(16, triton.next_power_of_2(num_heads)), 16, 4
    else:
        dot = 2 if mode is EntryMode.FP32 else 1
        block_h, block_k, num_warps = 16, 32, 8
    q_pieces = 2 if q.dtype == torch.float32 else 1
    (a0, s0), (a1, s1) = srcs[0], srcs[-1]
    grid = (num_tokens, triton.cdiv(num_heads, block_h))
    _sparse_attention_kernel[grid](
        q, out, sink.to(torch.float32).contiguous(),
        a0.buffer, s0, s0.shape[1], s0.stride(0), a0.block_size, a0.stride,
        a1.buffer, s1, s1.shape[1] if len(srcs) == 2 else 0, s1.stride(0), a1.block_size, a1.stride,
        num_heads, scale, q.stride(0), q.stride(1), out.stride(0), out.stride(1),
        MODE=int(mode), HEAD_DIM=head_dim, DATA_BYTES=a0.data_bytes, SCALE_BYTES=a0.scale_bytes,
        BLOCK_H=block_h, BLOCK_K=block_k, BLOCK_D=triton.next_power_of_2(head_dim), DOT=dot, Q_PIECES=q_pieces,
        NUM_SOURCES=len(srcs), num_warps=num_warps,
    )
    return out
