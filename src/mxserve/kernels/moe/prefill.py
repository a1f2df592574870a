"""Launcher of the MXFP4 prefill tile (variant "bf16-prefill", and "bf16" at prefill sizes): `prefill_experts`.

Five launches: prep (x's operand values in even-then-odd order per 128-block: the stream decode's
prep kernel), the expert sort (`align.py`), gate/up with the SwiGLU, down, and the top-k combine
(`_moe_combine_kernel`). `_experts_prefill_kernel.py` says why the loop is shaped as it is, and
why the bits are those of "bf16-split" / "bf16-stream".
"""

from __future__ import annotations

import torch
import triton

from mxserve.kernels.moe._experts_kernel import _moe_combine_kernel
from mxserve.kernels.moe._experts_prefill_kernel import _moe_prefill_down_kernel, _moe_prefill_gate_up_kernel
from mxserve.kernels.moe._experts_stream_kernel import _moe_stream_prep_kernel
from mxserve.kernels.moe.align import align_triton
from mxserve.kernels.moe.router import interpreting

# --- launch parameters (H200; benchmarks/moe.py --prefill-configs sweeps them) ---------------------
# block_m: rows (pairs of one expert) per program: one decoded weight tile serves that many rows, so
# more rows spend fewer decode instructions per MMA, but each expert's last block is padded up to it.
# Up to `small_pairs_per_expert` pairs per expert on average a launch takes `small_block_m`. Gate/up
# programs are 128 channels (one fake-quantization block of h) of gate AND up; down_block_n is the
# down kernel's output features per program. Any values give the same bits. These defaults are the
# sm_90 compile report's choice (0.50 warp instructions per MMA kFLOP at 128 rows, no spills, Triton
# 3.9), not yet timed: benchmarks/gpu_s6_moeprefill.sh times them against 5 other configs.
CONFIG = {"block_m": 128, "small_block_m": 64, "small_pairs_per_expert": 48, "down_block_n": 128,
          "num_warps": 8, "num_stages": 3, "down_num_warps": 8, "down_num_stages": 3}
# -------------------------------------------------------------------------------------------------


def block_m_for(num_pairs: int, num_experts: int) -> int:
    """Rows per block for a call of `num_pairs` (token, slot) pairs: depends on the count only."""
    if num_pairs <= CONFIG["small_pairs_per_expert"] * num_experts:
        return CONFIG["small_block_m"]
    return CONFIG["block_m"]


def prefill_experts(x: torch.Tensor, expert_ids: torch.Tensor, weights: torch.Tensor, st, *, limit: float,
                    quantize_inputs: bool, hidden_dtype: torch.dtype) -> torch.Tensor:
    """Σ_k weight_k · expert_{id_k}(x) → fp32 [T, D], the bits of variants "bf16-split" / "bf16-stream".
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
    block_m = block_m_for(num_pairs, st.num_experts)
    down_block_n = CONFIG["down_block_n"]
    if interpreting():
        warps, stages, down_warps, down_stages = 4, 1, 4, 1
    else:
        warps, stages = CONFIG["num_warps"], CONFIG["num_stages"]
        down_warps, down_stages = CONFIG["down_num_warps"], CONFIG["down_num_stages"]
    if st.dim % down_block_n:
        raise ValueError(f"prefill_experts: D={st.dim} must be a multiple of CONFIG down_block_n={down_block_n}")
    # ------------------------------------------------------------------------------------------

    xp = torch.empty((num_tokens, st.dim), dtype=x.dtype, device=dev)
    no_counters = torch.empty((1,), dtype=torch.int32, device=dev)  # num_cnt 0: never written
    _moe_stream_prep_kernel[(num_tokens, st.dim // 128)](
        x, xp, no_counters, 0, x.stride(0), xp.stride(0), QUANT=quantize_inputs, ZERO_PER=1, num_warps=1,
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
        H_BF16=hidden_dtype == torch.bfloat16, QUANT_H=quantize_inputs, num_warps=warps, num_stages=stages,
    )
    y = torch.empty((num_pairs, st.dim), dtype=torch.float32, device=dev)
    _moe_prefill_down_kernel[(st.dim // down_block_n, cap // block_m)](
        h, st.w2, words[2],
        blocks.sorted_pair_ids, blocks.block_expert, blocks.expert_start, blocks.expert_count,
        y, st.hidden, st.dim, num_pairs,
        h.stride(0), st.w2.stride(0), st.w2.stride(1), words[2].stride(0), words[2].stride(1), y.stride(0),
        BLOCK_M=block_m, BLOCK_N=down_block_n, DOT=dot, X_PIECES=h_pieces, USE_ASM=use_asm,
        num_warps=down_warps, num_stages=down_stages,
    )
    out = torch.empty((num_tokens, st.dim), dtype=torch.float32, device=dev)  # the combine writes all of it
    block_d = 512
    _moe_combine_kernel[(num_tokens, triton.cdiv(st.dim, block_d))](
        y, expert_ids.contiguous(), out, st.dim, y.stride(0), out.stride(0),
        TOP_K=top_k, KPAD=triton.next_power_of_2(top_k), BLOCK_D=block_d,
    )
    return out
