"""Launcher of the MXFP4 prefill tile (variant "bf16-prefill", and "bf16" at prefill sizes): `prefill_experts`.

Five launches: prep (x's operand values in even-then-odd order per 128-block: the stream decode's
prep, PREP_ROWS tokens a program), the expert sort (`align.py`), gate/up with the SwiGLU, down, and
the top-k combine (`_moe_combine_kernel`). `_experts_prefill_kernel.py` says why the loop is shaped as it is, and
why the bits are those of "bf16-split" / "bf16-stream".
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton

from mxserve.kernels.moe._experts_kernel import _moe_combine_kernel
from mxserve.kernels.moe._experts_prefill_kernel import (
    _moe_prefill_down_kernel,
    _moe_prefill_gate_up_kernel,
    _moe_prefill_prep_kernel,
)
from mxserve.kernels.moe.align import align_triton
from mxserve.kernels.moe.router import interpreting


@dataclass(frozen=True)
class Tile:
    """One launch configuration of the prefill tile (any values give the same bits)."""

    block_m: int  # rows (pairs of one expert) per program: one decoded weight tile serves that many rows
    num_warps: int  # gate/up (programs of 128 channels of gate AND up: one fake-quantization block of h)
    num_stages: int
    down_block_n: int  # down: output features per program
    down_num_warps: int
    down_num_stages: int


# --- launch parameters (H200; benchmarks/moe.py --prefill-configs sweeps them) ---------------------
# More rows a block spend fewer decode instructions per MMA, but each expert's last block is padded up
# to block_m, so the tile follows the AVERAGE pairs per expert of the call (a count, never the
# routing's values): tiers (at most this many pairs per expert on average, tile), first fit; None = any.
# Measured on the H200 (session 6 call 3, Flash MoE, real routing, gpu_s6_moeprefill.sh):
#   4096 tokens (96 pairs/expert): 128 rows 4.85 ms, with 256-feature down programs 4.77, 64 rows 6.30,
#     32 rows 7.59 (bf16 grouped matmul 6.34; the fused tile 64.9);
#   1024 tokens (24 pairs/expert): 32 rows on 4 warps 2.58 ms, 64 rows 3.18, 128 rows 4.52 (grouped 4.78).
# The 64-row tier between is the padding model's choice (Poisson rows per expert, per-row cost from
# the worst-routing run: 32 rows 1.7x and 64 rows 1.26x the 128-row tile's), not measured at its sizes.
CONFIG = {
    "tiers": (
        (32, Tile(32, 4, 3, 128, 4, 3)),
        (64, Tile(64, 8, 3, 128, 8, 3)),
        (None, Tile(128, 8, 3, 256, 8, 3)),
    ),
}
# fp32 activations (exact numerics, or fp32 x / hidden) double the activation buffers: 128 rows at 3
# stages needs 264 KB of shared memory (the H200 refused it, session 6 call 3), so those calls take
# at most this many rows (64 rows: 166 KB, sm_90 compile report).
FP32_MAX_BLOCK_M = 64
PREP_ROWS = 16  # tokens per program of the prep kernel (4 warps: 2048 elements)
# -------------------------------------------------------------------------------------------------


def tile_for(num_pairs: int, num_experts: int, *, fp32_activations: bool = False) -> Tile:
    """The tile for a call of `num_pairs` (token, slot) pairs: depends on the counts and dtypes only."""
    tiers = [t for _, t in CONFIG["tiers"]]
    if fp32_activations:
        tiers = [t for t in tiers if t.block_m <= FP32_MAX_BLOCK_M] or [min(tiers, key=lambda t: t.block_m)]
    for most, tile in CONFIG["tiers"]:
        if tile in tiers and (most is None or num_pairs <= most * num_experts):
            return tile
    return tiers[-1]


def prefill_experts(x: torch.Tensor, expert_ids: torch.Tensor, weights: torch.Tensor, st, *, limit: float,
                    quantize_inputs: bool, hidden_dtype: torch.dtype, mma_order: bool = False) -> torch.Tensor:
    """Σ_k weight_k · expert_{id_k}(x) → fp32 [T, D], the bits of variants "bf16-split" / "bf16-stream"
    (mma_order: those of "bf16-stream-splitk" without a K split; `_experts_prefill_kernel.py`).
    `st`: MXFP4 `StackedExperts` with scale bytes <= 128 (checked by the caller); x [T, D] fp32/bf16,
    T >= 1; expert_ids / weights [T, k]."""
    num_tokens, top_k = expert_ids.shape
    if num_tokens == 0:
        raise ValueError("prefill_experts: no tokens (the caller returns the empty result)")
    if st.fmt != "mxfp4" or st.hidden % 128 or st.dim % 128:
        raise ValueError(f"prefill_experts: needs MXFP4 experts with I, D multiples of 128, got {st.fmt} "
                         f"I={st.hidden} D={st.dim}")
    for name, w in (("w1", st.w1), ("w3", st.w3), ("w2", st.w2)):
        if w.stride(-1) != 1:
            raise ValueError(f"prefill_experts: {name} codes must be contiguous in K, got {w.stride()=}")
    if st.w1.stride() != st.w3.stride() or st.w1_scales.stride() != st.w3_scales.stride():
        raise ValueError(f"prefill_experts: w1 and w3 must share strides, got {st.w1.stride()} / {st.w3.stride()}")
    words = st.scale_words  # the scales as int32 [E, N, K/128]
    dev = x.device
    x = x.contiguous()
    num_pairs = num_tokens * top_k
    route_w = weights.reshape(-1).float().contiguous()

    # --- launch parameters -----------------------------------------------------------------------
    dot = 0 if interpreting() else 1
    use_asm = not interpreting()
    x_pieces = 2 if (x.dtype == torch.float32 and not quantize_inputs) else 1
    h_pieces = 2 if (hidden_dtype == torch.float32 and not quantize_inputs) else 1
    tile = tile_for(num_pairs, st.num_experts,
                    fp32_activations=x.dtype == torch.float32 or hidden_dtype == torch.float32)
    block_m, down_block_n = tile.block_m, tile.down_block_n
    if interpreting():  # its fp32 product-sum holds [BLOCK_N, BLOCK_M, 64]: at most 2^20 elements there
        warps, stages, down_warps, down_stages = 4, 1, 4, 1
        down_block_n = min(down_block_n, 128)
    else:
        warps, stages, down_warps, down_stages = (tile.num_warps, tile.num_stages, tile.down_num_warps,
                                                  tile.down_num_stages)
    if st.dim % down_block_n:
        raise ValueError(f"prefill_experts: D={st.dim} must be a multiple of the tile's down_block_n={down_block_n}")
    # ------------------------------------------------------------------------------------------

    xp = torch.empty((num_tokens, st.dim), dtype=x.dtype, device=dev)
    _moe_prefill_prep_kernel[(triton.cdiv(num_tokens, PREP_ROWS), st.dim // 128)](
        x, xp, num_tokens, x.stride(0), xp.stride(0), QUANT=quantize_inputs, ROWS=PREP_ROWS, MMA_ORDER=mma_order,
        num_warps=4,
    )
    blocks = align_triton(expert_ids, st.num_experts, block_m)
    cap = blocks.capacity
    h = torch.empty((cap, st.hidden), dtype=hidden_dtype, device=dev)  # valid rows only
    _moe_prefill_gate_up_kernel[(st.hidden // 128, cap // block_m)](
        xp, st.w1, words[0], st.w3, words[1],
        blocks.sorted_pair_ids, blocks.block_expert, blocks.expert_start, blocks.expert_count, route_w,
        h, st.hidden, st.dim, num_pairs, top_k, float(limit),
        xp.stride(0), st.w1.stride(0), st.w1.stride(1), words[0].stride(0), words[0].stride(1), h.stride(0),
        BLOCK_M=block_m, BLOCK_N=128, DOT=dot, X_PIECES=x_pieces, USE_ASM=use_asm,
        H_BF16=hidden_dtype == torch.bfloat16, QUANT_H=quantize_inputs, MMA_ORDER=mma_order, num_warps=warps,
        num_stages=stages,
    )
    y = torch.empty((num_pairs, st.dim), dtype=torch.float32, device=dev)
    _moe_prefill_down_kernel[(st.dim // down_block_n, cap // block_m)](
        h, st.w2, words[2],
        blocks.sorted_pair_ids, blocks.block_expert, blocks.expert_start, blocks.expert_count,
        y, st.hidden, st.dim, num_pairs,
        h.stride(0), st.w2.stride(0), st.w2.stride(1), words[2].stride(0), words[2].stride(1), y.stride(0),
        BLOCK_M=block_m, BLOCK_N=down_block_n, DOT=dot, X_PIECES=h_pieces, USE_ASM=use_asm, MMA_ORDER=mma_order,
        num_warps=down_warps, num_stages=down_stages,
    )
    out = torch.empty((num_tokens, st.dim), dtype=torch.float32, device=dev)  # the combine writes all of it
    block_d = 512
    _moe_combine_kernel[(num_tokens, triton.cdiv(st.dim, block_d))](
        y, expert_ids.contiguous(), out, st.dim, y.stride(0), out.stride(0),
        TOP_K=top_k, KPAD=triton.next_power_of_2(top_k), BLOCK_D=block_d,
    )
    return out
