"""Triton launcher of the routed experts: `moe_experts_triton`, the contract of `moe_experts_ref`.

Weights are stacked once per layer (`StackedExperts.of`, at load: the kernels index experts by
id in one tensor per matrix) in the release MXFP4 layout, or repacked losslessly to 128x128
block FP8 (spec §6.6). Per call: sort the (token, slot) pairs by expert (`align_triton`), one
launch for gate/up with the clamped SwiGLU, the routing weight, the hidden dtype rounding and
(faithful numerics) the FP8 fake quantization of the hidden fused, one launch for down, and one
that sums each token's k expert outputs in ascending expert id order.

Variants ("how the multiply runs"; all compute the same math, tolerances in tests/kernels/moe):
  "bf16"  weights widened in registers to bf16 (exact), activations bf16 (fp32 as hi + lo),
  "w4a8"  FP8 tensor cores: activations as e4m3fn codes + per-128 scales (faithful numerics
          only, where the activations are FP8 values anyway), weights rescaled per 128-K block.
  "bf16-split"  "bf16"'s numbers bit for bit (MXFP4 only, scale bytes <= 128), decode tile in
          separate gate / up / SwiGLU / down launches of 64-feature programs with a cheaper nibble
          decode (`_experts_split_kernel.py`); used up to 16 pairs per expert on average, the fused
          prefill tile above. "bf16" takes this decode by itself wherever it applies: on the H200
          (2026-12-01) it ran 1 token in 76 us against the fused kernel's 225, 64 tokens in 1.6 ms
          against 17.6 (docs/benchmarks.md, MoE).
  "bf16-stream"  "bf16-split"'s bits, decode up to 512 pairs in 3 launches that keep several
          128-K blocks of codes, scales and activations in flight (`stream.py`,
          `_experts_stream_kernel.py`); larger calls as "bf16-split". "bf16" takes it by itself up to
          STREAM_DEFAULT_MAX_PAIRS pairs, where it measured faster than the split decode.
  "bf16-prefill"  "bf16-split"'s bits in the prefill tile (`prefill.py`, `_experts_prefill_kernel.py`:
          the stream decode's pipelined K loop over 32/64/128-row blocks of the sort, gate and up in one
          loop) at every size. "bf16" takes it by itself for prefill-sized calls (above the split
          decode's sizes) on experts the split decode applies to; others keep the fused tile. On the
          H200 (session 6 call 3, Flash MoE, real routing) 4096 tokens took 4.77-4.85 ms against the
          fused tile's 64.9 and the bf16 grouped matmul's 6.34; 1024 tokens 2.58 against 4.78.
  "bf16-stream-splitk"  opt-in (issue 10): the stream decode with the weights widened straight into
          the wgmma operand registers (`stream_splitk.py`; K split across programs if its CONFIG says so,
          shipped without: H200 session 7 call 2, 48.5 us at 1 token against "bf16-stream"'s 62.8); the
          fp32 sums group K differently, so its bits are its own (tolerance, not equality, against the
          others). Above MMA_DECODE_MAX_PAIRS pairs (and tile="prefill") the prefill tile in the same
          K order (`prefill_experts(mma_order=True)`): the same bits as the decode when CONFIG has no K
          split (the prefill tile never splits), so batch invariant at every size.
  MMA order: "bf16" takes "bf16-stream-splitk"'s paths at every size on experts the split decode
          applies to, without a K split whatever its CONFIG: one K order for decode and prefill, so a
          token's bits do not depend on the batch (tests/kernels/moe/test_experts_mma_order.py).
          Chosen by the experts' shape (`mma_order_for`), never by the batch: ON for experts of
          hidden >= MMA_ORDER_MIN_DIM (DeepSeek-V4-Flash's 4096), where the H200 measured it faster
          (session 7: 1 token 61.5 -> 47.8 us, 64 tokens 1.67 -> 1.15 ms, 1024 2.64 -> 1.94 ms, 4096
          unchanged; session 8 call 1: the random Flash 4-layer model greedy for 256 tokens equal to
          the reference kernels, 3 of 4 prompts, the fourth a 0.094-nat near tie at token 177), OFF for
          smaller ones. On the packaged default model (hidden 256) its decode is a little faster
          (session 8 call 4, decode graph device time at 64 rows: 1.378 vs 1.402 ms) but its prefill
          tile is much slower: a 64-prompt prefill step of 25-token prompts took 68.1 ms with it
          against 42.6 ms without (call 6, the same process order, e2e 26.3k vs 34.0k tok/s), and a
          token's K order must be one for decode and prefill. MXSERVE_MOE_MMA_ORDER=1 / 0 forces it.
  "bf16-fused"  "bf16" with the split decode and the prefill tile off (the fused gate/up+SwiGLU
          kernel at every size): the off switch, and the baseline the benchmark times them against.
Tile shapes depend on the number of pairs (decode: 16-row blocks; fused prefill: 64; the prefill
tile: 32, 64 or 128, `prefill.tile_for`), never on the values, and a row's K order does not depend
on the tile, so results are batch invariant.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import torch
import triton

from mxserve.formats import QuantizedWeight, WeightLayout, mxfp4_to_fp8_block
from mxserve.kernels.act_quant import fake_quant_fp8, quantize_fp8_block
from mxserve.kernels.linear import ResidentWeight
from mxserve.kernels.moe._experts_kernel import _moe_combine_kernel, _moe_down_kernel, _moe_gate_up_kernel
from mxserve.kernels.moe._experts_split_kernel import (
    _moe_down_split_kernel,
    _moe_gate_up_split_kernel,
    _moe_swiglu_kernel,
)
from mxserve.kernels.moe.align import align_triton
from mxserve.kernels.moe.chooser import MAX_SPLIT_SCALE_BYTE
from mxserve.kernels.moe.prefill import prefill_experts
from mxserve.kernels.moe.reference import ExpertWeights
from mxserve.kernels.moe.router import check_device, interpreting
from mxserve.kernels.moe.stream import applies as stream_applies
from mxserve.kernels.moe.stream import stream_decode
from mxserve.kernels.moe.stream_splitk import splitk_decode

VARIANTS = ("bf16", "bf16-fused", "w4a8", "bf16-split", "bf16-stream", "bf16-prefill", "bf16-stream-splitk")
DECODE_MAX_PAIRS = 256  # up to this many (token, slot) pairs a launch uses 16-row blocks
TILES = {  # (BLOCK_M, num_warps, num_stages); BLOCK_N is 128 (one FP8 activation block of h)
    "decode": (16, 4, 3),
    "prefill": (64, 8, 3),
}
BLOCK_N = 128
SPLIT_BLOCK_N = 64  # one wgmma warpgroup tile: the per-element MMA sequence of the 128 tile's halves
SPLIT_MAX_PAIRS_PER_EXPERT = 16  # "bf16-split" runs its decode kernels up to this many pairs per expert
# "bf16" takes the stream decode (the split decode's bits) up to this many pairs: on the H200 (session 5
# call 1, Flash MoE, real routing) it ran 1 token in 61.4 us against the split decode's 75.3 and 4
# tokens in 211 against 224, but 16 tokens in 712 against 666 and 64 in 1712 against 1643.
STREAM_DEFAULT_MAX_PAIRS = 32
# The MMA K order (variant "bf16-stream-splitk"'s, module docstring) as "bf16"'s order at every size, by
# the experts' shape; MXSERVE_MOE_MMA_ORDER=1 / 0 forces it on / off ("auto" or unset: the shape rule).
MMA_ORDER_ENV = "MXSERVE_MOE_MMA_ORDER"
MMA_ORDER_MIN_DIM = 4096  # hidden size from which the shape rule turns it on (the size measured faster)
# In that order: the splitk decode (no K split) up to this many pairs, the prefill tile in MMA order above
# (both give the same bits, so this is a speed knob only; <= stream.STREAM_MAX_PAIRS).
MMA_DECODE_MAX_PAIRS = 512


def mma_order_for(dim: int) -> bool:
    """Whether variant "bf16" runs the MMA K order on experts of hidden size `dim`: `MMA_ORDER_ENV`
    "1" / "0" forces it, else (unset or "auto") on from `MMA_ORDER_MIN_DIM`. Read at each call (and so
    at graph capture); a function of the shape, never of the batch. ValueError for another value."""
    setting = os.environ.get(MMA_ORDER_ENV, "auto")
    if setting not in ("0", "1", "auto"):
        raise ValueError(f"{MMA_ORDER_ENV}={setting!r}; expected 0, 1 or auto")
    return setting == "1" or (setting == "auto" and dim >= MMA_ORDER_MIN_DIM)


def packed_or_none(w: object) -> QuantizedWeight | None:
    """The packed form of an expert matrix (a resident copy's source), None if full precision."""
    if isinstance(w, ResidentWeight):
        w = w.source
    return w if isinstance(w, QuantizedWeight) else None


def _packed(w: object) -> QuantizedWeight:
    q = packed_or_none(w)
    if q is None:
        raise ValueError(f"moe triton: expert weights must be quantized (MXFP4 or FP8 block), got {type(w).__name__}")
    return q


def scale_spread(scales: torch.Tensor) -> int:
    """Largest max - min of the 4 MXFP4 group scale bytes of one row's 128-K block."""
    g = scales.to(torch.int16).reshape(*scales.shape[:-1], -1, 4)
    return int((g.amax(-1) - g.amin(-1)).max()) if g.numel() else 0


@dataclass(frozen=True, eq=False)
class StackedExperts:
    """All experts of one layer, one tensor per matrix. fmt "mxfp4": codes [E, N, K/2] + UE8M0
    [E, N, K/32]; "fp8_block": e4m3fn codes [E, N, K] + UE8M0 [E, N/128, K/128]."""

    fmt: str
    w1: torch.Tensor  # gate codes [E, I, ...]
    w1_scales: torch.Tensor
    w3: torch.Tensor  # up codes [E, I, ...]
    w3_scales: torch.Tensor
    w2: torch.Tensor  # down codes [E, D, ...]
    w2_scales: torch.Tensor
    num_experts: int
    hidden: int  # I
    dim: int  # D

    @classmethod
    def of(cls, experts: Sequence[ExpertWeights], *, repack_fp8: bool = False) -> StackedExperts:
        """Stack per-expert weights (a copy: a loader should build this form directly)."""
        if not experts:
            raise ValueError("moe triton: no experts")
        first = _packed(experts[0].w1)
        hidden, dim = first.shape
        if dim % 128 or hidden % 128:
            raise ValueError(f"moe triton: expert dims must be multiples of 128, got I={hidden} D={dim}")
        mats = {"w1": [], "w3": [], "w2": []}
        for i, ex in enumerate(experts):
            for name in mats:
                q = _packed(getattr(ex, name))
                want = (dim, hidden) if name == "w2" else (hidden, dim)
                if tuple(q.shape) != want or q.layout is not first.layout:
                    raise ValueError(f"moe triton: expert {i} {name} is {q.layout.value} {tuple(q.shape)}, "
                                     f"expected {first.layout.value} {want}")
                if q.layout is WeightLayout.FP8_BLOCK and (q.fmt.name != "e4m3fn" or tuple(q.block) != (128, 128)):
                    raise ValueError(f"moe triton: expert {i} {name} must be e4m3fn 128x128, got {q.fmt.name} {q.block}")
                if repack_fp8 and q.layout is WeightLayout.MXFP4:
                    codes, scales = mxfp4_to_fp8_block(q.codes, q.scales, q.shape[-1])
                else:
                    codes, scales = q.codes, q.scales
                mats[name].append((codes, scales))
        fmt = "fp8_block" if (repack_fp8 or first.layout is WeightLayout.FP8_BLOCK) else "mxfp4"
        stack = {n: (torch.stack([c for c, _ in v]), torch.stack([s for _, s in v])) for n, v in mats.items()}
        return cls(fmt, *stack["w1"], *stack["w3"], *stack["w2"], len(experts), hidden, dim)

    @property
    def nbytes_per_expert(self) -> int:
        """Codes + scales of one expert's three matrices (what one hit expert streams)."""
        mats = (self.w1, self.w1_scales, self.w3, self.w3_scales, self.w2, self.w2_scales)
        return sum(t.numel() for t in mats) // self.num_experts

    def min_scale_byte(self) -> int:
        """Smallest UE8M0 byte: the in-register widening is exact for bytes >= 16."""
        return min(int(s.min()) for s in (self.w1_scales, self.w3_scales, self.w2_scales))

    def max_scale_byte(self) -> int:
        """Largest UE8M0 byte ("bf16-split" needs <= 128: the chooser's MAX_SPLIT_SCALE_BYTE)."""
        return max(int(s.max()) for s in (self.w1_scales, self.w3_scales, self.w2_scales))

    @cached_property
    def takes_split_decode(self) -> bool:
        """Whether variant "bf16" runs the split decode on these experts (MXFP4, scale bytes <=
        128). Computed once (a device reduction, so a host sync): `stacked_for` asks it at stacking."""
        return self.fmt == "mxfp4" and self.max_scale_byte() <= MAX_SPLIT_SCALE_BYTE

    @cached_property
    def scale_words(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The MXFP4 scales of w1, w3, w2 viewed as int32 [E, N, K/128]: one word holds the 4 group
        bytes of a row's 128-K block (byte g = group g), one 4-byte load for the stream decode."""
        return tuple(s.view(torch.int32) for s in (self.w1_scales, self.w3_scales, self.w2_scales))

    def max_w4a8_spread(self) -> int:
        """Largest spread (max - min) of the 4 group scale bytes of one row's 128-K block: the
        W4A8 weight rescale is lossless up to 14 (6 binades of headroom + e4m3fn's 8 below 0.5)."""
        if self.fmt != "mxfp4":
            return 0
        return max(scale_spread(s) for s in (self.w1_scales, self.w3_scales, self.w2_scales))


_stacked: dict[int, tuple[Sequence[ExpertWeights], StackedExperts]] = {}


def stacked_for(experts: Sequence[ExpertWeights] | StackedExperts, *, repack_fp8: bool = False) -> StackedExperts:
    """`experts` itself if already stacked, else the stacked copy built on first use (cached by
    identity, holding the sequence so its id cannot be reused)."""
    if isinstance(experts, StackedExperts):
        return experts
    key = id(experts)
    hit = _stacked.get(key)
    if hit is None or hit[0] is not experts or (hit[1].fmt == "fp8_block") != repack_fp8:
        hit = (experts, StackedExperts.of(experts, repack_fp8=repack_fp8))
        _stacked[key] = hit
        hit[1].takes_split_decode  # noqa: B018 -- its one host sync happens here, not in a captured step
    return hit[1]


def moe_experts_triton(
    x: torch.Tensor,
    expert_ids: torch.Tensor,
    weights: torch.Tensor,
    experts: Sequence[ExpertWeights] | StackedExperts,
    *,
    limit: float,
    quantize_inputs: bool,
    hidden_dtype: torch.dtype = torch.float32,
    variant: str = "bf16",
    repack_fp8: bool = False,
    tile: str = "auto",
) -> torch.Tensor:
    """Σ_k weight_k · expert_{id_k}(x) per token → fp32 [T, D]; see `moe_experts_ref`."""
    check_device(x, "moe_experts")
    if variant not in VARIANTS:
        raise ValueError(f"moe_experts: {variant=} not in {VARIANTS}")
    if variant == "w4a8" and not quantize_inputs:
        raise ValueError("moe_experts: the w4a8 variant needs quantize_inputs=True (faithful numerics)")
    if tile not in ("auto", "decode", "prefill"):
        raise ValueError(f"moe_experts: {tile=} must be 'auto', 'decode' or 'prefill'")
    if hidden_dtype not in (torch.float32, torch.bfloat16):
        raise ValueError(f"moe_experts: {hidden_dtype=} must be float32 or bfloat16")
    st = stacked_for(experts, repack_fp8=repack_fp8)
    if x.dim() != 2 or x.shape[1] != st.dim or x.dtype not in (torch.float32, torch.bfloat16):
        raise ValueError(f"moe_experts: x must be fp32/bf16 [T, {st.dim}], got {x.dtype} {tuple(x.shape)}")
    num_tokens = x.shape[0]
    if expert_ids.shape != weights.shape or expert_ids.dim() != 2 or expert_ids.shape[0] != num_tokens:
        raise ValueError(f"moe_experts: ids and weights must be [{num_tokens}, k], got {tuple(expert_ids.shape)} "
                         f"and {tuple(weights.shape)}")
    if st.w1.device != x.device:
        raise ValueError(f"moe_experts: weights on {st.w1.device}, x on {x.device}")
    top_k = expert_ids.shape[1]
    if num_tokens == 0:
        return torch.zeros((0, st.dim), dtype=torch.float32, device=x.device)
    num_pairs = num_tokens * top_k
    cheap_decode = ("bf16-split", "bf16-stream", "bf16-prefill", "bf16-stream-splitk")  # the bf16 2^(b-1) decode
    split = variant in cheap_decode or (variant == "bf16" and st.takes_split_decode)
    if variant in cheap_decode and st.fmt != "mxfp4":
        raise ValueError(f"moe_experts: variant {variant!r} reads MXFP4 experts, these are {st.fmt}")
    if variant in cheap_decode and not st.takes_split_decode:
        raise ValueError(f"moe_experts: variant {variant!r} needs scale bytes <= {MAX_SPLIT_SCALE_BYTE}, these reach "
                         f"{st.max_scale_byte()} > {MAX_SPLIT_SCALE_BYTE} (its bf16 factor would overflow)")
    if variant == "bf16-stream-splitk" or (variant == "bf16" and split and mma_order_for(st.dim)):
        kw = dict(limit=limit, quantize_inputs=quantize_inputs, hidden_dtype=hidden_dtype)
        if tile != "prefill" and stream_applies(num_pairs) and num_pairs <= MMA_DECODE_MAX_PAIRS:
            return splitk_decode(x, expert_ids, weights, st, whole_k=variant == "bf16", **kw)
        return prefill_experts(x, expert_ids, weights, st, mma_order=True, **kw)
    stream = variant == "bf16-stream" or (variant == "bf16" and split and num_pairs <= STREAM_DEFAULT_MAX_PAIRS)
    if stream and tile != "prefill" and stream_applies(num_pairs):
        return stream_decode(x, expert_ids, weights, st, limit=limit, quantize_inputs=quantize_inputs,
                             hidden_dtype=hidden_dtype)
    max_decode_pairs = SPLIT_MAX_PAIRS_PER_EXPERT * st.num_experts if split else DECODE_MAX_PAIRS
    is_decode = tile == "decode" or (tile == "auto" and num_pairs <= max_decode_pairs)
    if variant == "bf16-prefill" or (variant == "bf16" and split and not is_decode):
        return prefill_experts(x, expert_ids, weights, st, limit=limit, quantize_inputs=quantize_inputs,
                               hidden_dtype=hidden_dtype)
    out = torch.empty((num_tokens, st.dim), dtype=torch.float32, device=x.device)  # the combine writes all of it

    # --- launch parameters ---------------------------------------------------------------------
    x_fp8 = variant == "w4a8"
    dot = 0 if interpreting() else (2 if x_fp8 else 1)
    w_fmt = 0 if st.fmt == "mxfp4" else 1
    block_m, num_warps, num_stages = TILES["decode" if is_decode else "prefill"]
    if interpreting():
        block_m, num_warps, num_stages = (16 if is_decode else 32), 4, 1
    # ------------------------------------------------------------------------------------------

    x = x.contiguous()
    if x_fp8:
        x_op, x_scales = quantize_fp8_block(x)
    else:
        x_op = fake_quant_fp8(x, block=128) if quantize_inputs else x
        x_scales = out  # unused pointer
    x_pieces = 2 if (x_op.dtype == torch.float32 and not quantize_inputs) else 1
    blocks = align_triton(expert_ids, st.num_experts, block_m)
    cap = blocks.capacity
    h_bf16 = hidden_dtype == torch.bfloat16
    h_dtype = torch.uint8 if x_fp8 else hidden_dtype
    h = torch.empty((cap, st.hidden), dtype=h_dtype, device=x.device)
    hs = torch.empty((cap, triton.cdiv(st.hidden, 128)), dtype=torch.float32, device=x.device)
    route_w = weights.reshape(-1).float().contiguous()
    if split and is_decode:
        y = _split_decode(x_op, x_pieces, st, blocks, route_w, h, hs, float(limit), num_pairs, top_k, dot,
                          h_bf16=h_bf16, quantize_inputs=quantize_inputs, hidden_dtype=hidden_dtype,
                          block_m=block_m, num_warps=num_warps, num_stages=num_stages)
    else:
        grid = (triton.cdiv(st.hidden, BLOCK_N), cap // block_m)
        _moe_gate_up_kernel[grid](
            x_op, x_scales, st.w1, st.w1_scales, st.w3, st.w3_scales,
            blocks.sorted_pair_ids, blocks.block_expert, blocks.expert_start, blocks.expert_count, route_w,
            h, hs,
            st.hidden, st.dim, num_pairs, top_k, float(limit),
            x_op.stride(0), x_scales.stride(0), st.w1.stride(0), st.w1.stride(1), st.w1_scales.stride(0),
            st.w1_scales.stride(1), h.stride(0), hs.stride(0),
            BLOCK_M=block_m, BLOCK_N=BLOCK_N, W_FMT=w_fmt, DOT=dot, X_FP8=x_fp8, X_PIECES=x_pieces,
            H_BF16=h_bf16, QUANT_H=quantize_inputs, H_CODES=x_fp8,
            num_warps=num_warps, num_stages=num_stages,
        )
        y = torch.empty((num_pairs, st.dim), dtype=torch.float32, device=x.device)
        h_pieces = 2 if (hidden_dtype == torch.float32 and not quantize_inputs) else 1
        _moe_down_kernel[(triton.cdiv(st.dim, BLOCK_N), cap // block_m)](
            h, hs, st.w2, st.w2_scales,
            blocks.sorted_pair_ids, blocks.block_expert, blocks.expert_start, blocks.expert_count,
            y, st.hidden, st.dim, num_pairs,
            h.stride(0), hs.stride(0), st.w2.stride(0), st.w2.stride(1), st.w2_scales.stride(0), st.w2_scales.stride(1),
            y.stride(0),
            BLOCK_M=block_m, BLOCK_N=BLOCK_N, W_FMT=w_fmt, DOT=dot, X_FP8=x_fp8, X_PIECES=h_pieces,
            num_warps=num_warps, num_stages=num_stages,
        )
    kpad = triton.next_power_of_2(top_k)
    block_d = 512
    _moe_combine_kernel[(num_tokens, triton.cdiv(st.dim, block_d))](
        y, expert_ids.contiguous(), out, st.dim, y.stride(0), out.stride(0),
        TOP_K=top_k, KPAD=kpad, BLOCK_D=block_d,
    )
    return out


def _split_decode(x_op, x_pieces, st, blocks, route_w, h, hs, limit, num_pairs, top_k, dot, *, h_bf16,
                  quantize_inputs, hidden_dtype, block_m, num_warps, num_stages) -> torch.Tensor:
    """The "bf16-split" decode: gate and up as separate 64-feature programs into fp32 sums of the
    valid rows, the fused kernel's epilogue on them, then down in 64-feature programs → y [pairs, D]."""
    cap = blocks.capacity
    gu = torch.empty((cap, 2, st.hidden), dtype=torch.float32, device=x_op.device)  # only valid rows written
    use_asm = not interpreting()
    row_blocks = cap // block_m
    _moe_gate_up_split_kernel[(triton.cdiv(st.hidden, SPLIT_BLOCK_N), row_blocks, 2)](
        x_op, st.w1, st.w1_scales, st.w3, st.w3_scales,
        blocks.sorted_pair_ids, blocks.block_expert, blocks.expert_start, blocks.expert_count, gu,
        st.hidden, st.dim, num_pairs, top_k,
        x_op.stride(0), st.w1.stride(0), st.w1.stride(1), st.w1_scales.stride(0), st.w1_scales.stride(1),
        gu.stride(0),
        BLOCK_M=block_m, BLOCK_N=SPLIT_BLOCK_N, DOT=dot, X_PIECES=x_pieces, USE_ASM=use_asm,
        num_warps=num_warps, num_stages=num_stages,
    )
    _moe_swiglu_kernel[(triton.cdiv(st.hidden, BLOCK_N), row_blocks)](
        gu, blocks.sorted_pair_ids, blocks.block_expert, blocks.expert_start, blocks.expert_count, route_w,
        h, hs, st.hidden, num_pairs, limit, gu.stride(0), h.stride(0), hs.stride(0),
        BLOCK_M=block_m, BLOCK_N=BLOCK_N, H_BF16=h_bf16, QUANT_H=quantize_inputs,
        num_warps=4,
    )
    y = torch.empty((num_pairs, st.dim), dtype=torch.float32, device=x_op.device)
    h_pieces = 2 if (hidden_dtype == torch.float32 and not quantize_inputs) else 1
    _moe_down_split_kernel[(triton.cdiv(st.dim, SPLIT_BLOCK_N), row_blocks)](
        h, st.w2, st.w2_scales,
        blocks.sorted_pair_ids, blocks.block_expert, blocks.expert_start, blocks.expert_count,
        y, st.hidden, st.dim, num_pairs,
        h.stride(0), st.w2.stride(0), st.w2.stride(1), st.w2_scales.stride(0), st.w2_scales.stride(1), y.stride(0),
        BLOCK_M=block_m, BLOCK_N=SPLIT_BLOCK_N, DOT=dot, X_PIECES=h_pieces, USE_ASM=use_asm,
        num_warps=num_warps, num_stages=num_stages,
    )
    return y
