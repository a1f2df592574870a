"""Launchers of the tie-broken top-k Triton kernels: same contract and same indices as
`topk_tiebroken_ref` (score desc, then index asc; masked candidates never chosen; -1 padding).

`topk_tiebroken_triton` is the entry the attention chooser uses. For rows of up to 16384
candidates it launches the kernel MXSERVE_TOPK_KERNEL names: `rank` (`_topk_rank_kernel.py`,
session 7: sampled bounds, rank counting over many programs per row), `select` (the session-5
radix-select kernel, `_topk_select_kernel.py`), `legacy`, or `auto` (the default): rank for at most
RANK_MAX_ROWS rows when k >= RANK_MIN_K, select otherwise. Every kernel returns the twin's indices
exactly, so choosing by the row count changes no bit (batch invariance holds). The rule is the H200's
(session 8 call 1, `benchmarks/topk.py ab`, us per call with 10 calls a graph, rank / select):
k = 512: 1x16384 10.0 / 15.2, 8x16384 13.1 / 24.7, 4x1024 6.0 / 9.3, 16x16384 19.5 / 18.4,
32x1024 20.5 / 12.3; k = 64 (the default model): select faster at every row count (1x1024 5.8 /
4.0, 64x1024 8.6 / 5.9). Longer rows, and MXSERVE_TOPK_LEGACY=1, take the one-program legacy
kernel (`_topk_kernel.py`).

Limits (ValueError, never a silent fallback): rows of up to 65536 candidates (the row lives in
registers; Flash at 256K context has 65536 CSA entries), k <= 4096. Difference from the twin:
a NaN score on a valid candidate is not detected (the twin raises; checking would cost a host
sync per call): both kernels rank it by its bits, a positive NaN above +inf and a negative
NaN below -inf (the select kernel breaks ties among equal NaN bit patterns by index too).
"""

from __future__ import annotations

import functools
import os

import torch
import triton

from mxserve.kernels.early_start import early_start_launch
from mxserve.kernels.topk._topk_bound_kernel import _topk_bound_kernel
from mxserve.kernels.topk._topk_kernel import _topk_kernel
from mxserve.kernels.topk._topk_rank_kernel import _topk_rank_kernel
from mxserve.kernels.topk._topk_select_kernel import _topk_select_kernel
from mxserve.kernels.topk.reference import candidate_mask

MAX_CANDIDATES = 65536
MAX_K = 4096
SELECT_MAX_CANDIDATES = 16384  # the select kernel holds the row in registers: 32 per thread at 16 warps
LEGACY_ENV = "MXSERVE_TOPK_LEGACY"
KERNEL_ENV = "MXSERVE_TOPK_KERNEL"  # auto | rank | select | legacy, for rows of <= 16384 candidates
KERNELS = ("auto", "rank", "select", "legacy")
DEFAULT_KERNEL = "auto"
RANK_MAX_ROWS = 8  # "auto": the rank kernel up to this many rows (decode batches) ...
RANK_MIN_K = 512  # ... when k is at least this (Flash's index_topk); select otherwise (module docstring)


def topk_tiebroken_triton(
    scores: torch.Tensor,
    k: int,
    valid_mask: torch.Tensor | None = None,
    num_valid: torch.Tensor | None = None,
) -> torch.Tensor:
    """int64 [N, k], identical to `topk_tiebroken_ref` (see the module docstring for the kernel).
    Raises ValueError for an unknown MXSERVE_TOPK_KERNEL."""
    kernel = os.environ.get(KERNEL_ENV, DEFAULT_KERNEL)
    if kernel not in KERNELS:
        raise ValueError(f"{KERNEL_ENV}={kernel!r}; expected one of {KERNELS}")
    if os.environ.get(LEGACY_ENV, "0") == "1" or scores.shape[-1] > SELECT_MAX_CANDIDATES or kernel == "legacy":
        return topk_tiebroken_triton_legacy(scores, k, valid_mask, num_valid)
    if kernel == "auto":
        kernel = "rank" if scores.shape[0] <= RANK_MAX_ROWS and k >= RANK_MIN_K else "select"
    if kernel == "rank":
        return topk_tiebroken_triton_rank(scores, k, valid_mask, num_valid)
    return topk_tiebroken_triton_select(scores, k, valid_mask, num_valid)


def _checked(scores, k, valid_mask, num_valid, max_candidates):
    """(scores with unit last stride, int8 mask or a dummy, int32 num_valid or a dummy)."""
    if scores.dim() != 2 or scores.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise ValueError(f"scores must be a float [N, C] tensor, got {scores.dtype} {tuple(scores.shape)}")
    if not 0 <= k <= MAX_K:
        raise ValueError(f"k must be in [0, {MAX_K}], got {k=}")
    n, c = scores.shape
    if c > max_candidates:
        raise ValueError(f"top-k triton: {c} candidates per row exceed {max_candidates} (row held in registers)")
    if valid_mask is not None:
        candidate_mask(scores, valid_mask, None)  # shape/dtype checks with the twin's messages
    if num_valid is not None:
        num_valid = torch.as_tensor(num_valid, device=scores.device)
        if tuple(num_valid.shape) != (n,) or num_valid.dtype.is_floating_point:
            raise ValueError(f"num_valid must be an integer tensor [{n}], got {num_valid.dtype} {tuple(num_valid.shape)}")
    # views where possible: a conversion would be one more kernel per call in a captured step
    scores = scores if scores.stride(-1) == 1 else scores.contiguous()
    mask = scores
    if valid_mask is not None:
        mask = (valid_mask if valid_mask.stride(-1) == 1 else valid_mask.contiguous()).view(torch.int8)
    nv = scores
    if num_valid is not None:
        nv = num_valid if num_valid.dtype in (torch.int32, torch.int64) else num_valid.to(torch.int32)
        nv = nv.contiguous()
    return scores, mask, nv


def topk_tiebroken_triton_legacy(
    scores: torch.Tensor,
    k: int,
    valid_mask: torch.Tensor | None = None,
    num_valid: torch.Tensor | None = None,
) -> torch.Tensor:
    """The one-program-per-row kernel (bitwise threshold descent + bitonic sort of the winners)."""
    n, c = scores.shape if scores.dim() == 2 else (0, 0)
    scores, mask, nv = _checked(scores, k, valid_mask, num_valid, MAX_CANDIDATES)
    out = torch.full((n, k), -1, dtype=torch.int64, device=scores.device)
    if n == 0 or k == 0 or c == 0:
        return out
    block_c = triton.next_power_of_2(c)
    # -- launch parameters: ~32 row elements per thread ------------------------------------------
    num_warps = max(1, min(16, block_c // 1024))
    _topk_kernel[(n,)](
        scores, mask, nv, out, c, k, scores.stride(0), mask.stride(0), out.stride(0),
        HAS_MASK=valid_mask is not None, HAS_NUM=num_valid is not None, BLOCK_C=block_c,
        BLOCK_OUT=triton.next_power_of_2(max(k, 1)), num_warps=num_warps,
    )
    return out


@functools.cache
def _num_sms(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def select_launch_params(rows: int, c: int, k: int, device: torch.device,
                         programs_per_row: int | None = None, num_warps: int | None = None) -> dict:
    """The select kernel's constexprs and launch shape, from shapes (and the SM count) only."""
    block_c = max(32, triton.next_power_of_2(c))  # >= 32: the prefix count folds groups of 32
    block_k = triton.next_power_of_2(max(k, 1))
    # S is kept to <= cap candidates: 2x the output leaves room for the threshold bin's spill
    cap = min(block_c, max(2 * block_k, 512))
    if programs_per_row is None:
        # rank-ordering programs per row while the GPU has idle SMs (one program per SM); with
        # fewer, each would count more than 64 members x |S| pairs (and hold 64+ accumulators
        # per thread): one sort per row is cheaper
        sms = _num_sms(device.index if device.index is not None else torch.cuda.current_device()) \
            if device.type == "cuda" else 1
        spare = max(1, min(64, cap // 16, sms // max(rows, 1)))
        programs_per_row = 1 << (spare.bit_length() - 1)
        if cap // programs_per_row > 64:
            programs_per_row = 1
    # -- 4 warps up to 4096 candidates, then ~1024 per warp, at most 16 ---------------------------
    nw = num_warps if num_warps is not None else max(4, min(16, block_c // 1024))
    p = programs_per_row
    if p < 1 or p & (p - 1) or cap // p < 16:
        raise ValueError(f"programs_per_row must be a power of 2 with >= 16 candidates each, got {p} for {cap=}")
    return {
        "BLOCK_C": block_c, "BLOCK_K": block_k, "CAP": cap, "P": p, "RANK": p > 1,
        "BJ": 32 * nw,  # rank tile: one member j per thread (see _rank_and_store)
        "num_warps": nw,
    }


def topk_tiebroken_triton_select(
    scores: torch.Tensor,
    k: int,
    valid_mask: torch.Tensor | None = None,
    num_valid: torch.Tensor | None = None,
    *,
    programs_per_row: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """The radix-select kernel; `programs_per_row` (1: sort, >1: rank counting) and `num_warps`
    override the shape-based choice (tests and sweeps)."""
    n, c = scores.shape if scores.dim() == 2 else (0, 0)
    scores, mask, nv = _checked(scores, k, valid_mask, num_valid, SELECT_MAX_CANDIDATES)
    if n == 0 or k == 0 or c == 0:
        return torch.full((n, k), -1, dtype=torch.int64, device=scores.device)
    lp = select_launch_params(n, c, k, scores.device, programs_per_row, num_warps)
    out = torch.empty((n, k), dtype=torch.int64, device=scores.device)  # every slot is written
    needs_scratch = lp["RANK"] or lp["BLOCK_C"] > lp["CAP"]
    scratch = (torch.empty(n * lp["P"] * 2 * lp["CAP"], dtype=torch.int32, device=scores.device)
               if needs_scratch else out)
    _topk_select_kernel[(n, lp["P"])](
        scores, mask, nv, out, scratch, c, k, scores.stride(0), mask.stride(0), out.stride(0),
        HAS_MASK=valid_mask is not None, HAS_NUM=num_valid is not None, BLOCK_C=lp["BLOCK_C"],
        BLOCK_K=lp["BLOCK_K"], CAP=lp["CAP"], P=lp["P"], RANK=lp["RANK"], BJ=lp["BJ"],
        num_warps=lp["num_warps"], **early_start_launch(),
    )
    return out


# -- the rank kernels (session 7) --------------------------------------------------------------------
SAMPLE_KEYS = 2048  # the bound kernel's sample: every (BLOCK_C / 2048)-th key
SAMPLE_BACK = 3  # its first edge: where the sample count reaches kk / stride - 3
SAMPLE_EDGES = 3  # edges counted over the row in one pass; the first reaching kk is taken
BOUND_MIN_KEYS = 32768  # rows x candidates from which rows that fit CAP take the bound kernel too
RANK_PAD = 64  # `_topk_bound_kernel.PAD`: never-counting keys after S, at least the scalar-j chunk


def rank_launch_params(rows: int, c: int, k: int, device: torch.device, *, programs_per_row: int | None = None,
                       members: int | None = None, block_j: int | None = None, num_warps: int | None = None,
                       chunks_per_row: int | None = None, use_float: bool = True, bound: bool | None = None) -> dict:
    """Both rank-path launches' constexprs and shapes, from shapes (and the SM count) only.

    Rows of at most CAP candidates take one launch (the rank kernel reads the row); longer rows
    first go through the bound kernel (S compacted per row, Q programs a row, each compacting one
    chunk). Programs per row for the ranks: as many as the GPU has idle SMs for, each ranking an
    equal share of S in blocks of MB members."""
    block_c = max(32, triton.next_power_of_2(c))
    block_k = triton.next_power_of_2(max(k, 1))
    cap = min(block_c, max(2 * block_k, 512))  # S's capacity, as the select kernel's
    # long rows need S; many short ones gain from the sampled bound (fewer pairs to rank)
    from_s = block_c > cap or (rows * block_c >= BOUND_MIN_KEYS and block_c >= 64)
    if bound is not None:  # tests: force the bound kernel (or its absence, where the row fits CAP)
        if not bound and block_c > cap:
            raise ValueError(f"rows of {c} candidates need the bound kernel ({cap=})")
        from_s = bound
    sms = (_num_sms(device.index if device.index is not None else torch.cuda.current_device())
           if device.type == "cuda" else 1)
    spare = max(1, sms // max(rows, 1))
    # -- the bound kernel: 1024-key chunks while SMs are idle; ~32 keys a thread -------------
    q = chunks_per_row if chunks_per_row is not None else max(1, min(spare, block_c // 1024))
    bound = {"BLOCK_C": block_c, "CAP": cap, "CHUNK": block_c // q, "SAMPLE": max(1, block_c // SAMPLE_KEYS),
             "BACK": SAMPLE_BACK, "EDGES": SAMPLE_EDGES, "FLOAT": bool(use_float), "Q": q,
             "num_warps": max(4, min(16, block_c // 1024))}
    # -- the rank kernel ----------------------------------------------------------------------
    if from_s:
        # a typical S after the sampled bound: ~1.2 kk. Enough members for two programs of 128
        # on every SM: 2-warp programs of 128 members (2 a thread, scalar j), ~110 each; else
        # ~2 programs a SM with an equal share each, members on the threads of [JB, MB] tiles
        est = min(cap, max(32, (5 * block_k) // 4))
        many = rows * est >= 2 * sms * 128
        nw = num_warps if num_warps is not None else (2 if many else 4)
        if many:
            p = programs_per_row if programs_per_row is not None else triton.cdiv(est, 112)
            mb = members if members is not None else 128
        else:
            p = programs_per_row if programs_per_row is not None else max(1, min((2 * sms) // max(rows, 1), est // 16))
            mb = members if members is not None else min(128, max(16, triton.next_power_of_2(triton.cdiv(est, p))))
        scalar_j = mb >= 32 * nw
        jb = block_j if block_j is not None else (32 if scalar_j else 128)
    else:
        p = programs_per_row if programs_per_row is not None else max(1, min(spare, block_c // 8))
        mb = members if members is not None else min(64, max(8, triton.next_power_of_2(triton.cdiv(block_c, p))))
        nw = num_warps if num_warps is not None else (8 if mb >= 64 else 4)
        scalar_j = False
        jb = block_j if block_j is not None else min(128, block_c)
    if (p < 1 or mb < 1 or mb & (mb - 1) or jb & (jb - 1) or (not from_s and block_c % jb)
            or (scalar_j and not 4 <= jb <= RANK_PAD)):
        raise ValueError(f"rank launch: programs_per_row >= 1, members and block_j powers of 2 "
                         f"(block_j dividing {block_c=}, 4..{RANK_PAD} with scalar j), got {p=} {mb=} {jb=}")
    if from_s and (q < 1 or block_c % q or block_c // q < 32):
        raise ValueError(f"chunks_per_row must split {block_c=} into chunks of >= 32, got {q}")
    rank = {"BLOCK_C": block_c, "BLOCK_K": block_k, "CAP": cap, "P": p, "FROM_S": from_s, "SCALAR_J": scalar_j,
            "MB": mb, "JB": jb, "num_warps": nw}
    return {"rank": rank, "bound": bound if from_s else None}


def _bound_rows(scores: torch.Tensor, mask: torch.Tensor, nv: torch.Tensor, k: int, bd: dict, has: dict):
    """Launch the bound kernel: (head int32 [N, 4], S's indices int32 [N, CAP], keys int32
    [N, CAP + RANK_PAD]), views of one per-row buffer. head = [|S|, kk, fp32 keys?, -]."""
    n, c = scores.shape
    cap = bd["CAP"]
    scratch = torch.empty((n, 4 + 2 * cap + RANK_PAD), dtype=torch.int32, device=scores.device)
    head, sidx, skey = scratch[:, :4], scratch[:, 4:4 + cap], scratch[:, 4 + cap:]
    _topk_bound_kernel[(n, bd["Q"])](
        scores, mask, nv, head, sidx, skey, c, k, scores.stride(0), mask.stride(0), scratch.stride(0),
        **has, **{name: bd[name] for name in ("BLOCK_C", "CAP", "CHUNK", "SAMPLE", "BACK", "EDGES", "FLOAT")},
        num_warps=bd["num_warps"], **early_start_launch(),
    )
    return head, sidx, skey


def topk_tiebroken_triton_rank(
    scores: torch.Tensor,
    k: int,
    valid_mask: torch.Tensor | None = None,
    num_valid: torch.Tensor | None = None,
    **overrides,
) -> torch.Tensor:
    """The rank kernels; keyword `overrides` go to `rank_launch_params` (programs_per_row,
    members, block_j, num_warps, chunks_per_row, use_float, bound: tests and sweeps)."""
    n, c = scores.shape if scores.dim() == 2 else (0, 0)
    scores, mask, nv = _checked(scores, k, valid_mask, num_valid, SELECT_MAX_CANDIDATES)
    if n == 0 or k == 0 or c == 0:
        return torch.full((n, k), -1, dtype=torch.int64, device=scores.device)
    lp = rank_launch_params(n, c, k, scores.device, **overrides)
    rk, bd = lp["rank"], lp["bound"]
    out = torch.empty((n, k), dtype=torch.int64, device=scores.device)  # every slot is written
    has = {"HAS_MASK": valid_mask is not None, "HAS_NUM": num_valid is not None}
    if bd is not None:
        head, sidx, skey = _bound_rows(scores, mask, nv, k, bd, has)
    else:
        head = sidx = skey = out  # unused
    _topk_rank_kernel[(n, rk["P"])](
        scores, mask, nv, out, head, sidx, skey, c, k, scores.stride(0), mask.stride(0), out.stride(0),
        head.stride(0) if bd is not None else 0,
        **has, **{name: rk[name] for name in ("BLOCK_C", "BLOCK_K", "CAP", "P", "FROM_S", "SCALAR_J", "MB", "JB")},
        num_warps=rk["num_warps"], **early_start_launch(),
    )
    return out
