"""Launcher of the indexer-score Triton kernel (keys read from the paged indexer key cache).

`indexer_scores_cache_triton(q, head_weights, key_cache, key_slots)` = the twin
`indexer_scores_ref(q, head_weights, key_cache.read(key_slots))` without materialising the keys:
q [T, H, D] (fp32/bf16), head_weights [T, H] (already scaled), key_slots [N] int64 shared by every
query, or [T, N] one row per query (a decode batch: each row its own sequence's keys; the twin
per row) (−1: score computed against a zero key, i.e. 0; callers mask such candidates) → scores
fp32 [T, N]. The per-row form changes only where a program reads its slots, not the arithmetic.
"""

from __future__ import annotations

import torch
import triton

from mxserve.kernels.attention_ops.cache_args import EntryMode, cache_args
from mxserve.kernels.early_start import early_start_launch
from mxserve.kernels.indexer._indexer_kernel import _indexer_scores_kernel
from mxserve.kernels.triton_switch import interpreting


def indexer_scores_cache_triton(q: torch.Tensor, head_weights: torch.Tensor, key_cache, key_slots: torch.Tensor) -> torch.Tensor:
    if q.dim() != 3 or q.dtype not in (torch.float32, torch.bfloat16):
        raise ValueError(f"indexer_scores: q must be fp32/bf16 [T, H, D], got {q.dtype} {tuple(q.shape)}")
    num_tokens, num_heads, head_dim = q.shape
    if head_weights.shape != (num_tokens, num_heads):
        raise ValueError(f"indexer_scores: head_weights must be [{num_tokens}, {num_heads}], got "
                         f"{tuple(head_weights.shape)}")
    args = cache_args(key_cache)
    if args.head_dim != head_dim:
        raise ValueError(f"indexer_scores: key cache head_dim {args.head_dim} != q head_dim {head_dim}")
    per_row = key_slots.dim() == 2
    if not (key_slots.dim() == 1 or (per_row and key_slots.shape[0] == num_tokens)) or key_slots.dtype != torch.int64:
        raise ValueError(f"indexer_scores: key_slots must be int64 [N] or [{num_tokens}, N], got {key_slots.dtype} "
                         f"{tuple(key_slots.shape)}")
    key_cache.layout.check_slots(key_slots)
    key_slots = key_slots.contiguous()
    q = q if q.stride(-1) == 1 else q.contiguous()
    w = head_weights.to(torch.float32).contiguous()
    n = key_slots.shape[-1]
    out = torch.empty(num_tokens, n, dtype=torch.float32, device=q.device)
    if num_tokens == 0 or n == 0:
        return out
    # -- launch parameters -------------------------------------------------------------------
    if interpreting():
        dot, block_h, block_n, num_warps = 0, min(16, triton.next_power_of_2(num_heads)), 32, 4
    else:
        dot = 2 if args.mode is EntryMode.FP32 else 1
        block_h, block_n, num_warps = 16, 64, 4
    grid = (num_tokens, triton.cdiv(n, block_n))
    _indexer_scores_kernel[grid](
        q, w, key_slots, out, args.buffer, args.block_size, args.stride, num_heads, n,
        q.stride(0), q.stride(1), w.stride(0), out.stride(0), key_slots.stride(0) if per_row else 0,
        MODE=int(args.mode), HEAD_DIM=head_dim, DATA_BYTES=args.data_bytes, SCALE_BYTES=args.scale_bytes,
        BLOCK_H=block_h, BLOCK_N=block_n, BLOCK_D=triton.next_power_of_2(head_dim), DOT=dot,
        Q_PIECES=2 if q.dtype == torch.float32 else 1, num_warps=num_warps, **early_start_launch(),
    )
    return out
