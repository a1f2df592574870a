"""Triton launchers of the hyper-connection ops: `hc_pre_triton`, `hc_post_triton`, `hc_head_triton`.

The same signatures and contracts as the twins in `reference.py`, and the same bits in practice
(`_hc_kernel.py` says where the fp64 summation orders differ from torch's and why that rounds to
the same fp32 / bf16 values except with probability ~2^-22 per value).
Launches per call: hc_pre 3 (sums of squares, partial mixes, finish: block input + post/comb with
the whole Sinkhorn in registers, one post/comb program per token; 4 with the side stream: post/comb
a launch of their own), hc_head 3 (the same without post/comb), hc_post 1. Every launch parameter is a function of (hc, D, number of mixes) only, never of the token count, so a token's
result does not depend on the batch; nothing here reads a device value on the host (CUDA-graph
capture). Runs on CUDA tensors, or anywhere under TRITON_INTERPRET=1 (the test suite).

Decode latency (session 7; the sm_90 SASS of the device's Triton 3.6 build): the kernels move
almost no bytes, so their time is dependent chains. Two changes keep every value's bits:
* L1 prefetches at the top of the mix, finish (block input) and hc_post programs: 3.6 issued the
  mix kernel's 16 K-steps' loads one step at a time after the rho chain, so each step waited for
  a memory round trip;
* comb with one element a thread (`_comb_lanes`, hc <= 4): 3.6 gave each thread a whole column,
  so each Sinkhorn half-step ran 4 fp64 divisions in a row (156 for 20 iterations).
Early start (PDL): the mix, finish and hc_post kernels are programmatic dependent launches, and
the sumsq, mix and finish programs signal at their start that the next launch may begin, so each
launch's start-up overlaps the previous kernel. A dependent program reads nothing written by a
launch still in flight and stores nothing before `griddepcontrol.wait` (its predecessor finished,
and by induction every launch before it). Before the wait, mix and finish prefetch rows of fn
and of the streams: whatever the caller wrote before calling hc_pre / hc_head was finished when
their sumsq launch (an ordinary one) began, and every early start since began after it. hc_post
has no such launch before it, so it reads and prefetches only after its wait. Same bits.
`MXSERVE_HC_OLD_KERNELS=1` (read at every call) launches the kernels exactly as before, for A/B
runs in one process.
Fewer launches (session 17, `MXSERVE_HC_FUSED=1`, read at every call; off until measured on the
H200): with few K-splits (hc·D <= FUSED_SUMSQ_MAX_SPLITS · SPLIT_K, the default model) each mix
program computes the sums of squares of its tokens itself, the same steps as the sums-of-squares
launch, which is then skipped (every program of a token reads the whole row again: cheap only
while the row is short); and `hc_pre_norm_triton` / `hc_head_norm_triton` apply the block's RMS
norm inside the finish launch when one program holds a whole row (D <= BLOCK_D), with the norm
kernel's operations. hc_pre + norm: 4 launches → 2. Otherwise they are hc_pre / hc_head followed
by `rms_norm_triton`, the same launches as without the switch.
`MXSERVE_HC_SIDE_STREAM=1` (CUDA only, off until measured) launches the post/comb programs of
`hc_pre` on a second stream, beside the block that follows, and `hc_post_triton` joins it first:
in a decode step the Sinkhorn then leaves the critical path.
"""

from __future__ import annotations

import os

import torch
import triton

from mxserve.kernels.early_start import early_start_enabled
from mxserve.kernels.hyper_connection._hc_kernel import (
    _hc_finish_kernel,
    _hc_mix_kernel,
    _hc_post_kernel,
    _hc_sumsq_kernel,
)
from mxserve.kernels.hyper_connection.chooser import MAX_HC
from mxserve.kernels.hyper_connection.reference import HyperConnectionWeights
from mxserve.kernels.hyper_connection.side_stream import (
    join_side_stream,
    side_stream_enabled,
    side_stream_fork,
)
from mxserve.kernels.rms_norm.triton import rms_norm_triton
from mxserve.kernels.triton_switch import interpreting

STREAM_DTYPES = (torch.float32, torch.bfloat16)

# --- launch parameters: fixed, or functions of (hc, D, N) only (batch invariance) --------------
SPLIT_K = 256  # flattened stream elements (of hc·D) per K-split of the sums of squares and the mixes
SUMSQ_BLOCK_T, SUMSQ_BLOCK_K = 4, 128  # tokens x elements per step of the sum of squares
MIX_BLOCK_T = 4  # tokens per mix program (they share each fn tile load)
MIX_TILE = 2048  # fp64 accumulators per mix program: BLOCK_T x BLOCK_N x BLOCK_K (8 a thread)
# The interpreter's cost is per operation, not per element: fewer, longer steps over the split
# (another fixed order of the fp64 sums, as batch invariant; tests run the GPU tile too)
INTERPRETER_MIX_TILE = 16384
FINISH_BLOCK_T = 4  # tokens per finish block-input program
# tokens per post/comb program (FINISH_BLOCK_T // this of them per token block): one, so each thread
# holds one element of the [1, hc, hc] comb and runs one fp64 division per Sinkhorn half-step
# (with 4 tokens a program the layout gave a thread 2 tokens at the default model and all 4 at
# Flash, their divisions serialised: the Sinkhorn chain ran 2-4x)
FINISH_POST_BLOCK_T = 1
BLOCK_D = 512  # hidden channels per finish / hc_post program
FUSED_ENV = "MXSERVE_HC_FUSED"
FUSED_SUMSQ_MAX_SPLITS = 8  # the fused mix recomputes a token's whole sum of squares in every split program
# warps per kernel: the mix program's [4, 32, 16] fp64 tile and its 16 unrolled steps' loads fit
# 8 warps without spills (sm90_compile.py); the others are small
NUM_WARPS = {"sumsq": 4, "mix": 8, "finish": 4, "post": 4}
# FMA contraction: only where every product is exact in fp64 (it cannot change a bit there); the
# finish kernel's pre_i·X_i is not, and the twins never fuse
FP_FUSION = {"sumsq": True, "mix": True, "finish": False, "post": False}


def launch_constexprs(hc: int, dim: int, num_mixes: int, *, interpreter: bool, old: bool = False) -> dict[str, dict]:
    """Kernel name → its shape constexprs for (hc, D, N): what the launchers pass (and what
    `tests/kernels/hyper_connection/sm90_compile.py` compiles). Never a function of T. `old`: the
    kernels as they were before session 7 (no prefetch, comb in the register tile)."""
    k = hc * dim
    num_splits = triton.cdiv(k, SPLIT_K)
    block_n = triton.next_power_of_2(num_mixes)
    tile = INTERPRETER_MIX_TILE if interpreter else MIX_TILE
    block_d = min(BLOCK_D, triton.next_power_of_2(dim))
    hc_pad = triton.next_power_of_2(hc)
    splits_pad = triton.next_power_of_2(num_splits)
    prefetch = not interpreter and not old  # inline PTX: the interpreter cannot run it
    pdl = not interpreter and not old  # "Early start" in the module docstring
    comb_lanes = not old and hc_pad == 4 and FINISH_POST_BLOCK_T == 1
    return {
        "sumsq": dict(NUM_SPLITS=num_splits, SPLIT_K=SPLIT_K, BLOCK_T=SUMSQ_BLOCK_T, BLOCK_K=SUMSQ_BLOCK_K, PDL=pdl),
        "mix": dict(NUM_SPLITS=num_splits, SPLITS_PAD=splits_pad, SPLIT_K=SPLIT_K, BLOCK_T=MIX_BLOCK_T, BLOCK_N=block_n,
                    BLOCK_K=max(16, min(SPLIT_K, tile // (MIX_BLOCK_T * block_n))), PREFETCH=prefetch, PDL=pdl),
        "finish": dict(HC=hc, HC_PAD=hc_pad, NUM_SPLITS=num_splits, SPLITS_PAD=splits_pad, BLOCK_T=FINISH_BLOCK_T,
                       BLOCK_D=block_d, POST_BLOCK_T=FINISH_POST_BLOCK_T, PREFETCH=prefetch, COMB_LANES=comb_lanes,
                       PDL=pdl),
        "post": dict(HC=hc, HC_PAD=hc_pad, BLOCK_D=block_d, PREFETCH=prefetch, PDL=pdl),
    }
# -------------------------------------------------------------------------------------------------


def old_kernels() -> bool:
    """MXSERVE_HC_OLD_KERNELS=1: launch the kernels as before session 7 (read at every call, so
    one process can time both)."""
    return os.environ.get("MXSERVE_HC_OLD_KERNELS", "0") == "1"


def fused_launches() -> bool:
    """MXSERVE_HC_FUSED=1: the sums of squares inside the mix launch and the block norm inside the
    finish launch where the shapes allow it (module docstring; read at every call, so one process
    can time both). Never with the old kernels."""
    return os.environ.get(FUSED_ENV, "0") == "1" and not old_kernels()


def _constexprs(hc: int, dim: int, num_mixes: int) -> dict[str, dict]:
    return launch_constexprs(hc, dim, num_mixes, interpreter=interpreting(), old=old_kernels())


def _check_device(t: torch.Tensor, op: str) -> None:
    if t.device.type != "cuda" and not interpreting():
        raise ValueError(f"{op} triton backend needs a CUDA tensor or TRITON_INTERPRET=1, got {t.device=}")


def _pdl_launch(consts: dict) -> dict:
    """The launch option of a kernel whose PDL constexpr is on: a programmatic dependent launch."""
    return {"launch_pdl": True} if consts.get("PDL") else {}


def _launch_opts(kernel: str) -> dict:
    opts = {"num_warps": NUM_WARPS[kernel]}
    if not interpreting():  # the interpreter never fuses (and does not accept the flag)
        opts["enable_fp_fusion"] = FP_FUSION[kernel]
    return opts


def _check_streams(streams: torch.Tensor, op: str) -> tuple[int, int, int]:
    _check_device(streams, op)
    if streams.dim() != 3:
        raise ValueError(f"{op}: streams must be [T, hc, D], got {tuple(streams.shape)=}")
    if streams.dtype not in STREAM_DTYPES:
        raise ValueError(f"{op}: streams must be fp32 or bf16, got {streams.dtype=}")
    num_tokens, hc, dim = streams.shape
    if not 1 <= hc <= MAX_HC:
        raise ValueError(f"{op}: need 1 <= hc <= {MAX_HC}, got {hc=}")
    return num_tokens, hc, dim


def _check_param(t: torch.Tensor, shape: tuple[int, ...], name: str, op: str, device: torch.device) -> None:
    if tuple(t.shape) != shape or not t.is_floating_point() or t.device != device:
        raise ValueError(f"{op}: {name} must be a float tensor {list(shape)} on {device}, got "
                         f"{t.dtype} {list(t.shape)} on {t.device}")


def _check_hc_weights(streams: torch.Tensor, w: HyperConnectionWeights, op: str) -> None:
    _, hc, dim = streams.shape
    n = (2 + hc) * hc
    _check_param(w.fn, (n, hc * dim), "fn", op, streams.device)
    _check_param(w.base, (n,), "base", op, streams.device)
    _check_param(w.scale, (3,), "scale", op, streams.device)


def _check_head_weights(streams: torch.Tensor, fn: torch.Tensor, base: torch.Tensor, scale: torch.Tensor,
                        op: str) -> None:
    _, hc, dim = streams.shape
    _check_param(fn, (hc, hc * dim), "fn", op, streams.device)
    _check_param(base, (hc,), "base", op, streams.device)
    if scale.numel() < 1 or scale.device != streams.device:
        raise ValueError(f"{op}: scale must hold at least one value on {streams.device}, got "
                         f"{list(scale.shape)} on {scale.device}")


def _mix_partials(streams: torch.Tensor, fn: torch.Tensor, rms_eps: float) -> torch.Tensor:
    """Per token and K-split, the fp64 partial mixes of the rho-scaled flattened streams
    [T, S, N] fp64. Two launches (sums of squares, then the mixes)."""
    num_tokens, hc, dim = streams.shape
    k, n = hc * dim, fn.shape[0]
    consts = _constexprs(hc, dim, n)
    num_splits = consts["sumsq"]["NUM_SPLITS"]
    mixes = torch.empty((num_tokens, num_splits, n), dtype=torch.float64, device=streams.device)
    mix_args = (num_tokens, k, n, streams.stride(0), fn.stride(0))
    mix_kwargs = dict(RMS_EPS=float(rms_eps), USE_LIBDEVICE=not interpreting(), **consts["mix"], **_launch_opts("mix"))
    if fused_launches() and num_splits <= FUSED_SUMSQ_MAX_SPLITS:
        # one launch: the first of hc_pre, so an early start only where the sums-of-squares launch had one
        _hc_mix_kernel[(triton.cdiv(num_tokens, MIX_BLOCK_T), num_splits)](
            streams, fn, mixes, mixes, *mix_args, FUSED_SUMSQ=True, SUMSQ_BLOCK_K=SUMSQ_BLOCK_K, **mix_kwargs,
            **(_pdl_launch(consts["mix"]) if early_start_enabled() else {}),
        )
        return mixes
    sumsq = torch.empty((num_tokens, num_splits), dtype=torch.float64, device=streams.device)
    _hc_sumsq_kernel[(triton.cdiv(num_tokens, SUMSQ_BLOCK_T), num_splits)](
        streams, sumsq, num_tokens, k, streams.stride(0), **consts["sumsq"], **_launch_opts("sumsq"),
        **(_pdl_launch(consts["sumsq"]) if early_start_enabled() else {}),
    )
    _hc_mix_kernel[(triton.cdiv(num_tokens, MIX_BLOCK_T), num_splits)](
        streams, fn, sumsq, mixes, *mix_args, **mix_kwargs, **_pdl_launch(consts["mix"]),
    )
    return mixes


def _finish(streams: torch.Tensor, mixes: torch.Tensor, base: torch.Tensor, scale: torch.Tensor, *, hc_eps: float,
            sinkhorn_iters: int, with_post: bool, split_launch: bool = False,
            post_dtype: torch.dtype = torch.float32, norm: tuple[torch.Tensor, float] | None = None):
    """The finish launch: (block input, post, comb); post/comb are placeholders without `with_post`.
    With the side stream on (or `split_launch`, for the tests) post/comb are a launch of their own.
    `post_dtype` float64: post and comb before their fp32 rounding (the GPU test of the orders).
    `norm` (weight, eps), only where `norm_fits`: the block input's RMS norm in its place."""
    num_tokens, hc, dim = streams.shape
    out = torch.empty((num_tokens, dim), dtype=streams.dtype, device=streams.device)
    if with_post:
        post = torch.empty((num_tokens, hc), dtype=post_dtype, device=streams.device)
        comb = torch.empty((num_tokens, hc, hc), dtype=post_dtype, device=streams.device)
    else:
        post = comb = out  # unused pointer slots (WITH_POST=False)
    consts = _constexprs(hc, dim, mixes.shape[2])["finish"]
    num_post = FINISH_BLOCK_T // FINISH_POST_BLOCK_T if with_post else 0  # post/comb programs per token block
    num_d = triton.cdiv(dim, consts["BLOCK_D"])
    args = (streams, mixes, base, scale, out, post, comb,
            num_tokens, dim, mixes.shape[2], int(sinkhorn_iters), streams.stride(0), streams.stride(1), out.stride(0))
    kwargs = dict(HC_EPS=float(hc_eps), WITH_POST=with_post, OUT_BF16=streams.dtype == torch.bfloat16,
                  USE_LIBDEVICE=not interpreting(), **consts, **_launch_opts("finish"))
    if norm is not None:
        if num_d != 1:
            raise ValueError(f"hc finish: the fused norm needs one D-block, got D={dim} > {consts['BLOCK_D']}")
        kwargs.update(norm_w_ptr=norm[0], NORM=True, NORM_EPS=float(norm[1]))
    token_blocks = triton.cdiv(num_tokens, FINISH_BLOCK_T)
    if with_post and (split_launch or (side_stream_enabled(streams) and not old_kernels())):
        # post/comb in a launch of their own (PART 2; on the side stream when it is on), then the
        # block input (PART 1): the same programs as PART 0's grid, so the same bits
        with side_stream_fork(streams.device, keep=(mixes, base, scale, post, comb), on=not old_kernels()):
            _hc_finish_kernel[(token_blocks, num_post)](*args, PART=2, **kwargs)  # an ordinary launch
        _hc_finish_kernel[(token_blocks, num_d)](*args, PART=1, **kwargs, **_pdl_launch(consts))
    else:
        _hc_finish_kernel[(token_blocks, num_d + num_post)](*args, PART=0, **kwargs, **_pdl_launch(consts))
    return out, post, comb


def hc_pre_triton(
    streams: torch.Tensor, w: HyperConnectionWeights, *, hc_eps: float, rms_eps: float, sinkhorn_iters: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """streams [T, hc, D] → (block input [T, D] in streams' dtype, post [T, hc], comb [T, hc, hc] fp32);
    see `hc_pre_ref`."""
    num_tokens, hc, dim = _check_streams(streams, "hc_pre")
    _check_hc_weights(streams, w, "hc_pre")
    streams, fn = streams.contiguous(), w.fn.contiguous()  # no-ops for the model's tensors
    if num_tokens == 0:
        return (streams.new_empty((0, dim)), streams.new_empty((0, hc), dtype=torch.float32),
                streams.new_empty((0, hc, hc), dtype=torch.float32))
    mixes = _mix_partials(streams, fn, rms_eps)
    return _finish(streams, mixes, w.base.contiguous(), w.scale.contiguous(), hc_eps=hc_eps,
                   sinkhorn_iters=sinkhorn_iters, with_post=True)


def hc_head_triton(
    streams: torch.Tensor, fn: torch.Tensor, base: torch.Tensor, scale: torch.Tensor, *, hc_eps: float, rms_eps: float
) -> torch.Tensor:
    """streams [T, hc, D] → the final collapse [T, D] in streams' dtype; see `hc_head_ref`."""
    num_tokens, _, dim = _check_streams(streams, "hc_head")
    _check_head_weights(streams, fn, base, scale, "hc_head")
    streams, fn = streams.contiguous(), fn.contiguous()
    if num_tokens == 0:
        return streams.new_empty((0, dim))
    mixes = _mix_partials(streams, fn, rms_eps)
    return _finish(streams, mixes, base.contiguous(), scale.contiguous(), hc_eps=hc_eps, sinkhorn_iters=1,
                   with_post=False)[0]


def norm_fits(dim: int) -> bool:
    """Whether one finish program holds a whole row of D channels (the fused norm's condition)."""
    return triton.next_power_of_2(dim) <= BLOCK_D


def _check_norm_weight(weight: torch.Tensor, streams: torch.Tensor, op: str) -> None:
    dim = streams.shape[2]
    if weight.shape != (dim,) or not weight.is_floating_point() or weight.device != streams.device:
        raise ValueError(f"{op}: norm_weight must be a float tensor [{dim}] on {streams.device}, got "
                         f"{weight.dtype} {list(weight.shape)} on {weight.device}")


def hc_pre_norm_triton(
    streams: torch.Tensor, w: HyperConnectionWeights, norm_weight: torch.Tensor, *, hc_eps: float, rms_eps: float,
    sinkhorn_iters: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`hc_pre_triton` then `rms_norm_triton` of the block input with `norm_weight` (eps `rms_eps`):
    (normed block input [T, D], post, comb); see `hc_pre_norm_ref`. With MXSERVE_HC_FUSED=1 and a
    row that one finish program holds, the norm runs inside the finish launch."""
    num_tokens, _, dim = _check_streams(streams, "hc_pre_norm")
    _check_norm_weight(norm_weight, streams, "hc_pre_norm")
    if not (fused_launches() and norm_fits(dim)) or num_tokens == 0:
        block_in, post, comb = hc_pre_triton(streams, w, hc_eps=hc_eps, rms_eps=rms_eps, sinkhorn_iters=sinkhorn_iters)
        return rms_norm_triton(block_in, norm_weight, rms_eps), post, comb
    _check_hc_weights(streams, w, "hc_pre_norm")
    streams = streams.contiguous()
    mixes = _mix_partials(streams, w.fn.contiguous(), rms_eps)
    return _finish(streams, mixes, w.base.contiguous(), w.scale.contiguous(), hc_eps=hc_eps,
                   sinkhorn_iters=sinkhorn_iters, with_post=True, norm=(norm_weight.contiguous(), rms_eps))


def hc_head_norm_triton(
    streams: torch.Tensor, fn: torch.Tensor, base: torch.Tensor, scale: torch.Tensor, norm_weight: torch.Tensor, *,
    hc_eps: float, rms_eps: float,
) -> torch.Tensor:
    """`hc_head_triton` then `rms_norm_triton` with `norm_weight` (the final norm); see
    `hc_head_norm_ref`. Fused as `hc_pre_norm_triton` is."""
    num_tokens, _, dim = _check_streams(streams, "hc_head_norm")
    _check_norm_weight(norm_weight, streams, "hc_head_norm")
    if not (fused_launches() and norm_fits(dim)) or num_tokens == 0:
        return rms_norm_triton(hc_head_triton(streams, fn, base, scale, hc_eps=hc_eps, rms_eps=rms_eps), norm_weight,
                               rms_eps)
    _check_head_weights(streams, fn, base, scale, "hc_head_norm")
    streams = streams.contiguous()
    mixes = _mix_partials(streams, fn.contiguous(), rms_eps)
    return _finish(streams, mixes, base.contiguous(), scale.contiguous(), hc_eps=hc_eps, sinkhorn_iters=1,
                   with_post=False, norm=(norm_weight.contiguous(), rms_eps))[0]


def hc_post_triton(block_out: torch.Tensor, streams: torch.Tensor, post: torch.Tensor,
                   comb: torch.Tensor, *, addend: torch.Tensor | None = None) -> torch.Tensor:
    """X'_j = post_j · F + Σ_i comb_ij · X_i in fp64, streams' dtype out [T, hc, D]; see `hc_post_ref`
    (with `addend`, F = (block_out + addend) rounded to the streams' dtype, inside the launch when
    both are fp32). One launch."""
    num_tokens, hc, dim = _check_streams(streams, "hc_post")
    join_side_stream(streams.device)  # post/comb may come from hc_pre's side-stream launch: wait first
    if addend is not None and (block_out.dtype != torch.float32 or addend.dtype != torch.float32):
        # torch's promotion rules for other dtypes are not the kernel's fp32 add: the twin's ops
        block_out, addend = (block_out + addend).to(streams.dtype), None
    for name, t in (("block_out", block_out), ("addend", addend)):
        if t is None:
            continue
        if t.shape != (num_tokens, dim) or not t.is_floating_point() or t.device != streams.device:
            raise ValueError(f"hc_post: {name} must be a float [{num_tokens}, {dim}] on {streams.device}, got "
                             f"{t.dtype} {tuple(t.shape)} on {t.device}")
        if t.stride(-1) != 1:
            raise ValueError(f"hc_post: {name}'s last dim must be contiguous, got {t.stride()=}")
    _check_param(post, (num_tokens, hc), "post", "hc_post", streams.device)
    _check_param(comb, (num_tokens, hc, hc), "comb", "hc_post", streams.device)
    streams, post, comb = streams.contiguous(), post.contiguous(), comb.contiguous()
    out = torch.empty_like(streams)
    if num_tokens == 0:
        return out
    consts = _constexprs(hc, dim, (2 + hc) * hc)["post"]
    _hc_post_kernel[(num_tokens, triton.cdiv(dim, consts["BLOCK_D"]))](
        block_out, block_out if addend is None else addend, streams, post, comb, out, num_tokens, dim,
        block_out.stride(0), 0 if addend is None else addend.stride(0), streams.stride(0), streams.stride(1),
        out.stride(0), out.stride(1),
        OUT_BF16=streams.dtype == torch.bfloat16, HAS_ADDEND=addend is not None, **consts, **_launch_opts("post"),
        **_pdl_launch(consts),
    )
    return out
