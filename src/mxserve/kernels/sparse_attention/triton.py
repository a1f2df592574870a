"""Launcher of the split-K sparse-attention Triton kernels: validates, picks launch parameters, launches.

Same contract as `sparse_attention_ref` (q [T, H, d], up to two (cache, slots [T, K]) sources of
one KV encoding, sink [H], scale → fp32 [T, H, d]); the caches are read in their stored bytes
through their `PageLayout` numbers (`cache_args`). `inspect` (verification only) cannot see
inside a kernel: when given, the reference is run beside the kernel on the same caches to feed
it, and the kernel's output is returned.

Split-K (flash-decoding): a partial kernel per chunk of BLOCK_K keys, then a combine kernel
that folds the chunks in order (`_sparse_attention_kernel` says how the fold is fixed by the
list lengths alone). Launch parameters, grids and the workspace come from shapes and the batch
size only, never from data (no host sync: CUDA-graph capturable).

Two partial kernels (`LaunchParams.kernel`):
- "pieces" (`_sparse_attention_kernel`, sessions 4-6): a chunk as 8 entry pieces of 64 channels,
  any KV encoding, any head count;
- "halves" (`_fold_kernel`, session 7): fp8_ds_mla entries as two 256-channel halves for q . k,
  the query loaded once per program, and a *fold* mode for large batches (one program per token
  and channel block folds every chunk in registers and writes the output: no workspace, one
  launch). Its split and fold modes give the same bits (same chunk partials, the combine's merge),
  so choosing the mode by the number of tokens keeps every row batch-invariant. It is another fold
  order than "pieces" (a different reduction layout for the probabilities' sum), within the same
  tolerance. OPT-IN (MXSERVE_SPARSE_ATTENTION_HALVES=1, fp8_ds_mla with more than 32 heads on a
  GPU): on the H200 (session 7 call 2, `benchmarks/gpu_s7_attn.sh`, Triton 3.6) it was slower
  than "pieces" at every Flash shape: CSA 4K b1 27.0 vs 22.1 us, b8 63.9 vs 24.4, b64 293.5 vs
  91.0; HCA b1 24.1 vs 21.3, b64 84.4 vs 36.6 (its GPU parity tests passed). The sm_90 compile
  its design came from was Triton 3.9's; why 3.6 runs it 1.2-3x slower is not investigated.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import triton

from mxserve.kernels.attention_ops.cache_args import EntryMode, cache_args
from mxserve.kernels.early_start import early_start_launch
from mxserve.kernels.sparse_attention._fold_kernel import _sparse_attention_fold_kernel
from mxserve.kernels.sparse_attention._sparse_attention_kernel import (
    _sparse_attention_combine_kernel,
    _sparse_attention_kernel,
)
from mxserve.kernels.sparse_attention.reference import sparse_attention_ref
from mxserve.kernels.triton_switch import interpreting

HALVES_ENV = "MXSERVE_SPARSE_ATTENTION_HALVES"  # "1": "halves" where eligible (opt-in: slower on the H200)


def sparse_attention_triton(
    q: torch.Tensor,
    sources: Sequence[tuple[object, torch.Tensor]],
    sink: torch.Tensor,
    scale: float,
    inspect: Callable[[str, torch.Tensor], None] | None = None,
    *,
    params: LaunchParams | None = None,
) -> torch.Tensor:
    """See `sparse_attention_ref`. Raises ValueError for > 2 sources, mixed encodings, bad shapes,
    head_dim > 512. `params` (tests only): other block sizes than `launch_params` picks."""
    if q.dim() != 3 or q.dtype not in (torch.float32, torch.bfloat16):
        raise ValueError(f"sparse_attention: q must be fp32/bf16 [T, H, d], got {q.dtype} {tuple(q.shape)}")
    if not 1 <= len(sources) <= 2:
        raise ValueError(f"sparse_attention: 1 or 2 sources (window, compressed), got {len(sources)}")
    q = q if q.stride(-1) == 1 else q.contiguous()
    num_tokens, num_heads, head_dim = q.shape
    if head_dim > 512:
        raise ValueError(f"sparse_attention: head_dim {head_dim} > 512 (the kernel works in 8 pieces of 64)")
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
    _launch(q, srcs, sink.to(torch.float32).contiguous(), scale, out, params)
    return out


# -- launch parameters -------------------------------------------------------------------------
WORKSPACE_MAX_BYTES = 256 << 20  # larger batches (prefill) run in slices of tokens
# combine tiles on a GPU: many programs, each with short loads (whole rows when interpreted)
COMBINE_BLOCK_H, COMBINE_BLOCK_D, COMBINE_NUM_WARPS, COMBINE_NUM_STAGES = 16, 64, 4, 4


@dataclass(frozen=True)
class LaunchParams:
    dot: int  # DOT mode of the kernels (0 interpreter, 1 bf16 tensor cores, 2 fp32 ieee)
    block_h: int  # heads per program
    block_k: int  # keys per chunk
    piece: int  # channels per entry piece (64: one fp8_ds_mla NoPE group; else load_entries); "pieces" only
    num_warps: int
    kernel: str = "pieces"  # "pieces" (_sparse_attention_kernel) or "halves" (_fold_kernel, fp8_ds_mla only)
    split_ch_blocks: int = 2  # "halves", split mode: programs per (token, head block, chunk), 1, 2 or 4
    fold_ch_blocks: int = 4  # "halves", fold mode: programs per (token, head block), 2 or 4
    fold_min_tokens: int = 32  # "halves": fold mode from this many tokens on (the same bits either way)
    fold_stages: int = 1  # "halves", fold mode: software-pipeline stages of the chunk loop
    pdl: bool = False  # "halves", split mode on a GPU: the combine as a programmatic dependent launch


# "halves" on a GPU (session 7; gpu_s7_attn.sh times it against "pieces"), from sm_90 compiles with
# Triton 3.9 (tests/kernels/sparse_attention/sm90_compile.py): 32-key chunks, so that q (64 KB of
# bf16 in shared memory), the chunk's two halves (32 KB) and the p . v pieces fit twice in an SM
# (split, 2 channel blocks: 112 KB, 241 registers; fold, 4 blocks: 104 KB, 255 registers, no spills;
# with 64-key chunks one program per SM, and the fold with 2 blocks spills ~800 bytes a thread).
# Split mode, 2 channel blocks: 40 programs for a batch-1 CSA layer (20 chunks), each with half
# the p . v. Fold mode from 32 tokens: the split's workspace (128 KB per chunk and token) would be
# 168 MB for 64 CSA rows; the fold holds a [64, 128] fp32 state per program instead.
# PDL: the combine's launch latency overlaps the partial kernel (as the FP8 linear decode's does).
HALVES_GPU = dict(kernel="halves", block_k=32, split_ch_blocks=2, fold_ch_blocks=4, fold_min_tokens=32,
                  fold_stages=1, pdl=True)


def halves_eligible(mode: EntryMode, head_dim: int) -> bool:
    """The "halves" kernel reads fp8_ds_mla entries (head_dim 512) only."""
    return mode is EntryMode.DS_MLA and head_dim == 512


def launch_params(mode: EntryMode, num_heads: int, head_dim: int) -> LaunchParams:
    """Block sizes from the cache encoding and the head shape only: they fix the fold, so they must
    never depend on the batch. The interpreter takes whole rows (one piece: its cost is per op)."""
    if interpreting():
        return LaunchParams(dot=0, block_h=min(64, triton.next_power_of_2(num_heads)), block_k=16,
                            piece=triton.next_power_of_2(head_dim), num_warps=4)
    if mode is EntryMode.FP32:  # fp32 "ieee" dots run on FMA units with operands in registers: small tiles
        return LaunchParams(dot=2, block_h=16, block_k=16, piece=64, num_warps=4)
    # one warpgroup, wgmma with M = 64 heads; no spills (tests/kernels/sparse_attention/sm90_compile.py)
    block_h = min(64, max(16, triton.next_power_of_2(num_heads)))  # tl.dot needs M >= 16
    if block_h < 64:
        # Few heads (the packaged default model's 4): a 16-head x 64-key chunk on 4 warps needs 255
        # registers and spills 364 bytes (Triton 3.9 for sm_90) and ran 39-41 us a launch on the
        # H200; 32-key chunks on 8 warps: 157 registers, no spills, 17.9-19.1 us (session 5 sweep,
        # benchmarks/attention_sweep.py). The chunking is a function of the head count only.
        return LaunchParams(dot=1, block_h=block_h, block_k=32, piece=64, num_warps=8)
    if halves_eligible(mode, head_dim) and os.environ.get(HALVES_ENV, "0") == "1":
        return LaunchParams(dot=1, block_h=64, piece=64, num_warps=4, **HALVES_GPU)
    return LaunchParams(dot=1, block_h=block_h, block_k=64, piece=64, num_warps=4)


def halves_params(lp: LaunchParams, **changes) -> LaunchParams:
    """`lp` (from `launch_params`) switched to the "halves" kernel with `changes` (tests and
    benchmarks): the interpreter keeps its block sizes; a GPU takes the Flash configuration (64-head
    blocks on one warpgroup, `HALVES_GPU`) whatever the head count."""
    if lp.dot == 0:
        return dataclasses.replace(lp, kernel="halves", **changes)
    return dataclasses.replace(lp, **{"dot": 1, "block_h": max(64, lp.block_h), "piece": 64, "num_warps": 4,
                                      **HALVES_GPU, **changes})


def _launch(q, srcs, sink, scale, out, lp: LaunchParams | None) -> None:
    num_tokens, num_heads, head_dim = q.shape
    (a0, s0), (a1, s1) = srcs[0], srcs[-1]
    k0, k1 = s0.shape[1], (s1.shape[1] if len(srcs) == 2 else 0)
    lp = lp or launch_params(a0.mode, num_heads, head_dim)
    if lp.kernel == "halves":
        if not halves_eligible(a0.mode, head_dim):
            raise ValueError(f"sparse_attention: the halves kernel reads fp8_ds_mla entries of 512, got {a0.mode.name} "
                             f"{head_dim}")
        _launch_halves(q, srcs, sink, scale, out, lp, k0, k1)
        return
    cb_h, cb_d = (lp.block_h, triton.next_power_of_2(head_dim)) if interpreting() else (COMBINE_BLOCK_H,
                                                                                         COMBINE_BLOCK_D)
    chunks0 = triton.cdiv(k0, lp.block_k)
    num_chunks = chunks0 + triton.cdiv(k1, lp.block_k)
    # every entry's data starts on 16 bytes: word loads (vectorized) instead of bytes
    aligned = all(a.stride % 16 == 0 and a.data_bytes % 16 == 0 and a.buffer.data_ptr() % 16 == 0 for a, _ in srcs)
    head_blocks = triton.cdiv(num_heads, lp.block_h)
    step = max(1, WORKSPACE_MAX_BYTES // max(1, num_chunks * num_heads * (head_dim + 2) * 4))
    for t0 in range(0, num_tokens, step):
        t1 = min(num_tokens, t0 + step)
        qs, outs = q[t0:t1], out[t0:t1]
        part_acc = torch.empty((t1 - t0, num_chunks, num_heads, head_dim), dtype=torch.float32, device=q.device)
        part_ml = torch.empty((t1 - t0, num_chunks, 2, num_heads), dtype=torch.float32, device=q.device)
        if num_chunks:
            _sparse_attention_kernel[(t1 - t0, head_blocks, num_chunks)](
                qs, part_acc, part_ml,
                a0.buffer, s0[t0:t1], k0, s0.stride(0), a0.block_size, a0.stride,
                a1.buffer, s1[t0:t1], k1, s1.stride(0), a1.block_size, a1.stride,
                chunks0, num_chunks, num_heads, scale, qs.stride(0), qs.stride(1),
                MODE=int(a0.mode), HEAD_DIM=head_dim, DATA_BYTES=a0.data_bytes, SCALE_BYTES=a0.scale_bytes,
                BLOCK_H=lp.block_h, BLOCK_K=lp.block_k, PIECE=lp.piece, DOT=lp.dot,
                Q_PIECES=2 if q.dtype == torch.float32 else 1, ALIGNED=aligned, NATIVE_FP8=not interpreting(),
                num_warps=lp.num_warps, **early_start_launch(),
            )
        _sparse_attention_combine_kernel[(t1 - t0, triton.cdiv(num_heads, cb_h), triton.cdiv(head_dim, cb_d))](
            part_acc, part_ml, sink, outs, num_chunks, num_heads, outs.stride(0), outs.stride(1),
            HEAD_DIM=head_dim, BLOCK_H=cb_h, BLOCK_D=cb_d, NUM_STAGES=COMBINE_NUM_STAGES,
            num_warps=COMBINE_NUM_WARPS, **early_start_launch(),
        )


def _launch_halves(q, srcs, sink, scale, out, lp: LaunchParams, k0: int, k1: int) -> None:
    """The "halves" kernel: fold mode (no workspace) from `lp.fold_min_tokens` tokens, else split mode
    and the combine kernel. Both give the same bits (`_fold_kernel`)."""
    num_tokens, num_heads, head_dim = q.shape
    (a0, s0), (a1, s1) = srcs[0], srcs[-1]
    chunks0 = triton.cdiv(k0, lp.block_k)
    num_chunks = chunks0 + triton.cdiv(k1, lp.block_k)
    aligned = all(a.stride % 16 == 0 and a.data_bytes % 16 == 0 and a.buffer.data_ptr() % 16 == 0 for a, _ in srcs)
    head_blocks = triton.cdiv(num_heads, lp.block_h)
    fold = num_tokens >= lp.fold_min_tokens
    ch_blocks = lp.fold_ch_blocks if fold else lp.split_ch_blocks
    if (ch_blocks not in (2, 4)) if fold else (ch_blocks not in (1, 2, 4)):
        raise ValueError(f"sparse_attention: {ch_blocks} channel blocks in {'fold' if fold else 'split'} mode")
    cb_h, cb_d = (lp.block_h, 512) if interpreting() else (COMBINE_BLOCK_H, COMBINE_BLOCK_D)
    pdl = lp.pdl and not fold and not interpreting() and num_chunks > 0
    common = dict(DATA_BYTES=a0.data_bytes, SCALE_BYTES=a0.scale_bytes, BLOCK_H=lp.block_h, BLOCK_K=lp.block_k,
                  CH_BLOCKS=ch_blocks, FOLD=fold, STAGES=lp.fold_stages if fold else 1, DOT=lp.dot,
                  Q_PIECES=2 if q.dtype == torch.float32 else 1, ALIGNED=aligned, NATIVE_FP8=not interpreting(),
                  PDL=pdl, num_warps=lp.num_warps)
    step = num_tokens if fold else max(1, WORKSPACE_MAX_BYTES // max(1, num_chunks * num_heads * (head_dim + 2) * 4))
    for t0 in range(0, num_tokens, step):
        t1 = min(num_tokens, t0 + step)
        qs, outs = q[t0:t1], out[t0:t1]
        if fold:
            part_acc = part_ml = outs  # unused in fold mode
        else:
            part_acc = torch.empty((t1 - t0, num_chunks, num_heads, head_dim), dtype=torch.float32, device=q.device)
            part_ml = torch.empty((t1 - t0, num_chunks, 2, num_heads), dtype=torch.float32, device=q.device)
        if num_chunks or fold:
            _sparse_attention_fold_kernel[(t1 - t0, head_blocks * ch_blocks, 1 if fold else num_chunks)](
                qs, part_acc, part_ml, sink, outs,
                a0.buffer, s0[t0:t1], k0, s0.stride(0), a0.block_size, a0.stride,
                a1.buffer, s1[t0:t1], k1, s1.stride(0), a1.block_size, a1.stride,
                chunks0, num_chunks, num_heads, scale, qs.stride(0), qs.stride(1), outs.stride(0), outs.stride(1),
                **common,
            )
        if not fold:
            _sparse_attention_combine_kernel[(t1 - t0, triton.cdiv(num_heads, cb_h), triton.cdiv(head_dim, cb_d))](
                part_acc, part_ml, sink, outs, num_chunks, num_heads, outs.stride(0), outs.stride(1),
                HEAD_DIM=head_dim, BLOCK_H=cb_h, BLOCK_D=cb_d, NUM_STAGES=COMBINE_NUM_STAGES, PDL=pdl,
                num_warps=COMBINE_NUM_WARPS, **({"launch_pdl": True} if pdl else {}),
            )
