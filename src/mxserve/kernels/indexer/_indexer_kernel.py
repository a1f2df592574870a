"""Private Triton kernel of the Lightning Indexer scores; launched only through `indexer/triton.py`.

One program = one query token x BLOCK_N candidate keys (from its own slot row, or the shared
one). Keys are gathered from the indexer key cache's bytes (FP8 codes x the key's fp32 power-of-two scale, or plain rows) by slot, once per
program; heads are visited in blocks of BLOCK_H: dots [BLOCK_H, BLOCK_N], ReLU, times the head
weights, summed over heads in a fixed order. No quantity depends on the number of tokens in
the launch (batch invariance). A score is exactly 0 whenever every head's dot is <= 0, as in the
twin, so the indexer's real ties survive (the top-k breaks them by index).

DOT: 0 = fp32 product-and-sum (interpreter); 1 = bf16 tensor cores (keys are exact in bf16, fp32
queries split hi + lo); 2 = fp32 "ieee" dots for fp32 key rows.
"""

from __future__ import annotations

import triton
import triton.language as tl

from mxserve.kernels.attention_ops._cache_jit import entry_offsets, load_entries
from mxserve.kernels.early_start import wait_for_previous


@triton.jit(do_not_specialize=['N'])  # run-time sizes: one compile for every value
def _indexer_scores_kernel(
    q_ptr, w_ptr, slots_ptr, out_ptr, buf, block_size, page_stride, H, N,
    stride_qt, stride_qh, stride_wt, stride_ot, stride_st,
    MODE: tl.constexpr, HEAD_DIM: tl.constexpr, DATA_BYTES: tl.constexpr, SCALE_BYTES: tl.constexpr,
    BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, DOT: tl.constexpr, Q_PIECES: tl.constexpr,
    PDL: tl.constexpr = False,  # early start: kernels/early_start.py
):
    wait_for_previous(PDL)  # before any load or store (kernels/early_start.py)
    t = tl.program_id(0)
    nn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.arange(0, BLOCK_D)
    slots = tl.load(slots_ptr + t * stride_st + nn, mask=nn < N, other=-1)  # stride_st 0: one key set
    valid = slots >= 0
    data_off, scale_off = entry_offsets(slots, block_size, page_stride, DATA_BYTES, SCALE_BYTES)
    k = load_entries(buf, data_off, scale_off, valid, cols, MODE, HEAD_DIM)  # fp32 [BLOCK_N, BLOCK_D]
    kb = k.to(tl.bfloat16)
    total = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for h0 in range(0, H, BLOCK_H):
        hh = h0 + tl.arange(0, BLOCK_H)
        hm = hh < H
        q = tl.load(q_ptr + t * stride_qt + hh[:, None] * stride_qh + cols[None, :],
                    mask=hm[:, None] & (cols < HEAD_DIM)[None, :], other=0.0).to(tl.float32)
        if DOT == 0:
            dots = tl.sum(q[:, None, :] * k[None, :, :], axis=2)
        elif DOT == 1:
            q_hi = q.to(tl.bfloat16)
            dots = tl.dot(q_hi, tl.trans(kb))
            if Q_PIECES == 2:
                dots = tl.dot((q - q_hi.to(tl.float32)).to(tl.bfloat16), tl.trans(kb), dots)
        else:
            dots = tl.dot(q, tl.trans(k), input_precision="ieee")
        w = tl.load(w_ptr + t * stride_wt + hh, mask=hm, other=0.0).to(tl.float32)
        total += tl.sum(tl.maximum(dots, 0.0) * w[:, None], axis=0)
    tl.store(out_ptr + t * stride_ot + nn, total, mask=nn < N)
