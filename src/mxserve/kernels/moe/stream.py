"""Launcher of the streaming MXFP4 expert decode (variant "bf16-stream"): `stream_decode`.

Three launches per call (`_experts_stream_kernel.py` says why each piece is where it is): prep
(x fake-quantized and stored even-then-odd per 128-block; arrival counters zeroed), gate/up
with the SwiGLU in each 128-channel block's last program, down with the top-k combine in each
(token, tile)'s last program. No sort launch: every program finds its rows from the expert ids,
which costs a scan of all pairs per program, so this path takes up to `STREAM_MAX_PAIRS` pairs
(64 tokens at top-6); `experts.py` sends larger calls to the split decode / fused prefill tile,
which give the same bits.
"""

from __future__ import annotations

import torch
import triton

from mxserve.kernels.moe._experts_stream_kernel import (
    _moe_stream_down_kernel,
    _moe_stream_gate_up_kernel,
    _moe_stream_prep_kernel,
)
from mxserve.kernels.moe.router import interpreting

STREAM_MAX_PAIRS = 512  # each program scans this many expert ids at most
BLOCK_M = 16  # rows (pairs) of one expert per program: the 16-row blocks of the split decode
# --- launch parameters (H200; benchmarks/moe.py --stream-configs sweeps them) ----------------------
# num_stages 4: 3 blocks of codes + scales + x in flight a program (sm_90, Triton 3.9: 96 registers,
# 45 KB shared, 4 programs per SM); pdl: all three launches programmatic dependent launches, gate/up
# and down prefetching their first pdl_blocks weight blocks into L2 before they wait for the kernel
# before them (the kernel docstrings say why it is safe; off: on the H200 it ran 1 token in 65.0 us
# against 61.4 without, 4 tokens in 207.9 against 211.2; n64s6 and n128s4 were slower too, session 5).
# block_n: output features per program, 64 (the split decode's wgmma tile) or 128 (the fused
# kernel's: half the programs, ~10% fewer K-loop instructions per byte); both give the same bits.
CONFIG = {"block_n": 64, "num_warps": 4, "num_stages": 4, "pdl": False, "pdl_blocks": 4}
# -------------------------------------------------------------------------------------------------


def applies(num_pairs: int) -> bool:
    return 0 < num_pairs <= STREAM_MAX_PAIRS


def checked_operands(caller: str, x: torch.Tensor, expert_ids: torch.Tensor, weights: torch.Tensor, st
                     ) -> tuple[int, tuple, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The stream decodes' shared checks (pair count, MXFP4 with 128-multiples, K-contiguous codes,
    w1/w3 sharing strides; errors named after `caller`) → (pairs, scale words, x, ids, route weights)
    in the layouts the kernels read."""
    num_tokens, top_k = expert_ids.shape
    num_pairs = num_tokens * top_k
    if not applies(num_pairs):
        raise ValueError(f"{caller}: {num_pairs=} must be in 1..{STREAM_MAX_PAIRS}")
    if st.fmt != "mxfp4" or st.hidden % 128 or st.dim % 128:
        raise ValueError(f"{caller}: needs MXFP4 experts with I, D multiples of 128, got {st.fmt} "
                         f"I={st.hidden} D={st.dim}")
    words = st.scale_words  # the scales as int32 [E, N, K/128]
    for name, w in (("w1", st.w1), ("w3", st.w3), ("w2", st.w2)):
        if w.stride(-1) != 1:
            raise ValueError(f"{caller}: {name} codes must be contiguous in K, got {w.stride()=}")
    if st.w1.stride() != st.w3.stride() or st.w1_scales.stride() != st.w3_scales.stride():
        raise ValueError(f"{caller}: w1 and w3 must share strides, got {st.w1.stride()} / {st.w3.stride()}")
    return (num_pairs, words, x.contiguous(), expert_ids.contiguous(),
            weights.reshape(-1).float().contiguous())


def stream_decode(x: torch.Tensor, expert_ids: torch.Tensor, weights: torch.Tensor, st, *, limit: float,
                  quantize_inputs: bool, hidden_dtype: torch.dtype) -> torch.Tensor:
    """Σ_k weight_k · expert_{id_k}(x) → fp32 [T, D], the bits of variants "bf16-split"/"bf16-fused".
    `st`: MXFP4 `StackedExperts` (scale bytes <= 128, checked by the caller); x [T, D] fp32/bf16;
    expert_ids / weights [T, k] with T·k <= STREAM_MAX_PAIRS."""
    num_pairs, words, x, ids, route_w = checked_operands("stream_decode", x, expert_ids, weights, st)
    num_tokens, top_k = expert_ids.shape
    dev = x.device

    # --- launch parameters -----------------------------------------------------------------------
    dot = 0 if interpreting() else 1
    use_asm = not interpreting()
    num_pad = 64 if num_pairs <= 64 else triton.next_power_of_2(STREAM_MAX_PAIRS)  # id-scan lanes: 2 compiles
    x_pieces = 2 if (x.dtype == torch.float32 and not quantize_inputs) else 1
    h_pieces = 2 if (hidden_dtype == torch.float32 and not quantize_inputs) else 1
    block_n = CONFIG["block_n"]
    if interpreting():
        warps, stages, pdl = 4, 1, False
    else:
        warps, stages, pdl = CONFIG["num_warps"], CONFIG["num_stages"], CONFIG["pdl"]
    if block_n not in (64, 128):
        raise ValueError(f"stream_decode: CONFIG block_n must be 64 or 128, got {block_n}")
    early = dict(PDL=pdl, PDL_BLOCKS=CONFIG["pdl_blocks"], **({"launch_pdl": True} if pdl else {}))
    num_gu_cnt = num_pairs * (st.hidden // 128)
    num_cnt = num_gu_cnt + num_tokens * (st.dim // block_n)
    prep_programs = num_tokens * (st.dim // 128)
    zero_per = triton.next_power_of_2(triton.cdiv(num_cnt, prep_programs))
    # ------------------------------------------------------------------------------------------

    xp = torch.empty((num_tokens, st.dim), dtype=x.dtype, device=dev)
    cnt = torch.empty((num_cnt,), dtype=torch.int32, device=dev)
    _moe_stream_prep_kernel[(num_tokens, st.dim // 128)](
        x, xp, cnt, num_cnt, x.stride(0), xp.stride(0), QUANT=quantize_inputs, ZERO_PER=zero_per, num_warps=1,
        PDL=pdl, **({"launch_pdl": True} if pdl else {}),
    )
    gu = torch.empty((num_pairs, 2, st.hidden), dtype=torch.float32, device=dev)  # valid rows only
    h = torch.empty((num_pairs, st.hidden), dtype=hidden_dtype, device=dev)
    _moe_stream_gate_up_kernel[(st.hidden // block_n, num_pairs, 2)](
        xp, st.w1, words[0], st.w3, words[1], ids, route_w, gu, h, cnt,
        st.hidden, st.dim, num_pairs, top_k, float(limit),
        xp.stride(0), st.w1.stride(0), st.w1.stride(1), words[0].stride(0), words[0].stride(1), gu.stride(0),
        h.stride(0),
        BLOCK_M=BLOCK_M, BLOCK_N=block_n, NP=num_pad, DOT=dot, X_PIECES=x_pieces, USE_ASM=use_asm,
        H_BF16=hidden_dtype == torch.bfloat16, QUANT_H=quantize_inputs, num_warps=warps, num_stages=stages, **early,
    )
    y = torch.empty((num_pairs, st.dim), dtype=torch.float32, device=dev)
    out = torch.empty((num_tokens, st.dim), dtype=torch.float32, device=dev)
    _moe_stream_down_kernel[(st.dim // block_n, num_pairs)](
        h, st.w2, words[2], ids, y, out, cnt[num_gu_cnt:],
        st.hidden, st.dim, num_pairs,
        h.stride(0), st.w2.stride(0), st.w2.stride(1), words[2].stride(0), words[2].stride(1), y.stride(0),
        out.stride(0),
        TOP_K=top_k, KPAD=triton.next_power_of_2(top_k), BLOCK_M=BLOCK_M, BLOCK_N=block_n, NP=num_pad, DOT=dot,
        X_PIECES=h_pieces, USE_ASM=use_asm, num_warps=warps, num_stages=stages, **early,
    )
    return out
