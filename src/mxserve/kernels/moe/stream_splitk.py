"""Launcher of variant "bf16-stream-splitk": `splitk_decode`, the stream decode (`stream.py`) with the
widened weights decoded straight into the wgmma operand registers and (optionally; not as shipped) K
split across programs (`_experts_stream_splitk_kernel.py` says why, and why the sums differ from "bf16-stream" in the last
bits). Three launches as "bf16-stream": prep (x in the MMA K order, counters zeroed), gate/up (SwiGLU
by the last program of each 128-channel block, after summing the splits in order), down (top-k
combine by the last program of each (token, tile), after summing each row's splits in order).

Opt-in (issue 10): faster than "bf16-stream" on the H200 (CONFIG), but its bits are not the default's;
MXSERVE_MOE_MMA_ORDER=1 (`experts.py`) makes this order the default at every size. Variant "bf16-stream-splitk" of `moe_experts_triton`,
backend "triton-stream-splitk" of the chooser (`MXSERVE_KERNEL_OVERRIDES=moe=triton-stream-splitk`).
Tolerances (tests/kernels/moe/test_experts_stream_splitk.py, test_gpu.py): the fp64 twin's, as every
bf16 variant; against "bf16-stream" only fp32 summation order differs.
"""

from __future__ import annotations

import torch
import triton

from mxserve.kernels.early_start import early_start_launch
from mxserve.kernels.moe._experts_stream_kernel import _moe_stream_prep_kernel
from mxserve.kernels.moe._experts_stream_splitk_kernel import (
    _moe_splitk_down_kernel,
    _moe_splitk_gate_up_kernel,
)
from mxserve.kernels.moe.router import interpreting
from mxserve.kernels.moe.stream import BLOCK_M, STREAM_MAX_PAIRS, checked_operands

# --- launch parameters (H200; benchmarks/moe.py --splitk-configs sweeps them) ----------------------
# gate_up_k_split / down_k_split: K columns per program (multiples of 128). The number of splits is
# cdiv(K, k_split): a function of the layer's shapes only (batch invariance). 0: no split (one program
# over all of K). block_n 64: one wgmma warpgroup tile (128: two, half the programs). maxnreg: the
# register cap (0: none). Uncapped, ptxas gives the kernels 107-110 registers for their epilogues
# (Triton 3.6, sm_90), which allows 4 programs per SM; at 80 the K loop still has no spill (the
# epilogue spills ~200 bytes) and 6 fit (shared memory: 29 KB a program at 4 stages).
# Measured on the H200 (session 7 call 2, Flash MoE, real top-6 routing, us a call under graph replay,
# benchmarks/results/2026-12-02-h200-s7-call2-moe_splitk.json), "bf16-stream" / no split r80 (g1d1r80,
# shipped) / 2+2 splits r80 / 4+2 splits r72 / 2+2 uncapped: 1 token 62.8 / 48.5 / 51.7 / 61.4 / 56.6,
# 4 tokens 209.1 / 155.8 / 164.8 / 191.4 / 169.5, 16 tokens 706.8 / 483.2 / 549.6 / 674.9 / 567.2.
# So no split: the register decode alone is the gain; the split stays an option (set k_split).
# pdl: gate/up and down as early starts too (kernels/early_start.py: waiting first, the same bits; with
# MXSERVE_EARLY_START=0 neither starts early). Off: no gain on the H200 (session 14 call 2, Flash MoE, real
# routing, us off / on: 1 token 47.8 / 48.8, 4 tokens 150.8 / 148.5, 16 tokens 470.6 / 469.2, 64 tokens
# 1122.1 / 1121.7). Call 3 swept the rest (same bits): s3, s6, s8, no register cap and block_n 128 were
# all slower than the shipped n64 s4 r80 at 1, 16 and 64 tokens (64 tokens 1154-1620 vs 1121 us).
CONFIG = {"block_n": 64, "num_warps": 4, "num_stages": 4, "gate_up_k_split": 0, "down_k_split": 0,
          "maxnreg": 80, "pdl": False}
# -------------------------------------------------------------------------------------------------


def num_splits(k: int, k_split: int) -> int:
    """Programs per output tile over K columns: a function of the shapes and the configuration only
    (k_split 0: one)."""
    if k_split == 0:
        return 1
    if k_split < 0 or k_split % 128:
        raise ValueError(f"stream_splitk: k_split must be 0 or a positive multiple of 128, got {k_split}")
    return triton.cdiv(k, k_split)


def split_width(k: int, k_split: int) -> int:
    """K columns per program: k_split, or all of K (k_split 0)."""
    return k if k_split == 0 else k_split


def splitk_decode(x: torch.Tensor, expert_ids: torch.Tensor, weights: torch.Tensor, st, *, limit: float,
                  quantize_inputs: bool, hidden_dtype: torch.dtype, whole_k: bool = False) -> torch.Tensor:
    """Σ_k weight_k · expert_{id_k}(x) → fp32 [T, D] (see the module docstring for the numerics).
    `st`: MXFP4 `StackedExperts` (scale bytes <= 128, checked by the caller); x [T, D] fp32/bf16;
    expert_ids / weights [T, k] with T·k <= STREAM_MAX_PAIRS. whole_k: no K split whatever CONFIG says
    (the bits of the prefill tile's MMA order, `experts.py`'s MMA_ORDER default)."""
    num_pairs, words, x, ids, route_w = checked_operands("splitk_decode", x, expert_ids, weights, st)
    num_tokens, top_k = expert_ids.shape
    dev = x.device

    # --- launch parameters -----------------------------------------------------------------------
    dot = 0 if interpreting() else 1
    use_asm = not interpreting()
    num_pad = 64 if num_pairs <= 64 else triton.next_power_of_2(STREAM_MAX_PAIRS)  # id-scan lanes: 2 compiles
    x_pieces = 2 if (x.dtype == torch.float32 and not quantize_inputs) else 1
    h_pieces = 2 if (hidden_dtype == torch.float32 and not quantize_inputs) else 1
    block_n = CONFIG["block_n"]
    if block_n not in (64, 128):
        raise ValueError(f"splitk_decode: CONFIG block_n must be 64 or 128, got {block_n}")
    if interpreting():
        launch = dict(num_warps=4, num_stages=1)
    else:
        launch = dict(num_warps=CONFIG["num_warps"], num_stages=CONFIG["num_stages"],
                      **({"maxnreg": CONFIG["maxnreg"]} if CONFIG["maxnreg"] else {}))
    gu_split, down_split = (0, 0) if whole_k else (CONFIG["gate_up_k_split"], CONFIG["down_k_split"])
    early = early_start_launch() if CONFIG["pdl"] else {}
    gu_splits, down_splits = num_splits(st.dim, gu_split), num_splits(st.hidden, down_split)
    gu_split, down_split = split_width(st.dim, gu_split), split_width(st.hidden, down_split)
    num_gu_cnt = num_pairs * (st.hidden // 128)
    num_cnt = num_gu_cnt + num_tokens * (st.dim // block_n)
    prep_programs = num_tokens * (st.dim // 128)
    zero_per = triton.next_power_of_2(triton.cdiv(num_cnt, prep_programs))
    # ------------------------------------------------------------------------------------------

    xp = torch.empty((num_tokens, st.dim), dtype=x.dtype, device=dev)
    cnt = torch.empty((num_cnt,), dtype=torch.int32, device=dev)
    _moe_stream_prep_kernel[(num_tokens, st.dim // 128)](
        x, xp, cnt, num_cnt, x.stride(0), xp.stride(0), QUANT=quantize_inputs, ZERO_PER=zero_per, num_warps=1,
        MMA_ORDER=True, **early_start_launch(),
    )
    gu = torch.empty((gu_splits, num_pairs, 2, st.hidden), dtype=torch.float32, device=dev)  # valid rows only
    h = torch.empty((num_pairs, st.hidden), dtype=hidden_dtype, device=dev)
    _moe_splitk_gate_up_kernel[(st.hidden // block_n, num_pairs, 2 * gu_splits)](
        xp, st.w1, words[0], st.w3, words[1], ids, route_w, gu, h, cnt,
        st.hidden, st.dim, num_pairs, top_k, float(limit),
        xp.stride(0), st.w1.stride(0), st.w1.stride(1), words[0].stride(0), words[0].stride(1), gu.stride(0),
        gu.stride(1), h.stride(0),
        SPLITS=gu_splits, K_SPLIT=gu_split, BLOCK_M=BLOCK_M, BLOCK_N=block_n, NP=num_pad, DOT=dot,
        X_PIECES=x_pieces, USE_ASM=use_asm, H_BF16=hidden_dtype == torch.bfloat16, QUANT_H=quantize_inputs,
        **launch, **early,
    )
    y = torch.empty((down_splits, num_pairs, st.dim), dtype=torch.float32, device=dev)
    out = torch.empty((num_tokens, st.dim), dtype=torch.float32, device=dev)
    _moe_splitk_down_kernel[(st.dim // block_n, num_pairs, down_splits)](
        h, st.w2, words[2], ids, y, out, cnt[num_gu_cnt:],
        st.hidden, st.dim, num_pairs,
        h.stride(0), st.w2.stride(0), st.w2.stride(1), words[2].stride(0), words[2].stride(1), y.stride(0),
        y.stride(1), out.stride(0),
        TOP_K=top_k, KPAD=triton.next_power_of_2(top_k), SPLITS=down_splits, K_SPLIT=down_split, BLOCK_M=BLOCK_M,
        BLOCK_N=block_n, NP=num_pad, DOT=dot, X_PIECES=h_pieces, USE_ASM=use_asm, **launch, **early,
    )
    return out
