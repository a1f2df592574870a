"""Launcher of the tie-broken top-k Triton kernel: same contract and same indices as
`topk_tiebroken_ref` (score desc, then index asc; masked candidates never chosen; -1 padding).

Limits (ValueError, never a silent fallback): rows of up to 65536 candidates (the row lives in
registers; Flash at 256K context has 65536 CSA entries), k <= 4096. Difference from the twin:
a NaN score on a valid candidate is not detected (the twin raises; checking would cost a host
sync per call) — it ranks as the largest (positive NaN) or smallest (negative NaN) value.
"""

from __future__ import annotations

import torch
import triton

from mxserve.kernels.topk._topk_kernel import _topk_kernel
from mxserve.kernels.topk.reference import candidate_mask

MAX_CANDIDATES = 65536
MAX_K = 4096


def topk_tiebroken_triton(
    scores: torch.Tensor,
    k: int,
    valid_mask: torch.Tensor | None = None,
    num_valid: torch.Tensor | None = None,
) -> torch.Tensor:
    if scores.dim() != 2 or scores.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise ValueError(f"scores must be a float [N, C] tensor, got {scores.dtype} {tuple(scores.shape)}")
    if not 0 <= k <= MAX_K:
        raise ValueError(f"k must be in [0, {MAX_K}], got {k=}")
    n, c = scores.shape
    if c > MAX_CANDIDATES:
        raise ValueError(f"top-k triton: {c} candidates per row exceed {MAX_CANDIDATES} (row held in registers)")
    if valid_mask is not None:
        candidate_mask(scores, valid_mask, None)  # shape/dtype checks with the twin's messages
    if num_valid is not None:
        num_valid = torch.as_tensor(num_valid, device=scores.device)
        if tuple(num_valid.shape) != (n,) or num_valid.dtype.is_floating_point:
            raise ValueError(f"num_valid must be an integer tensor [{n}], got {num_valid.dtype} {tuple(num_valid.shape)}")
    out = torch.full((n, k), -1, dtype=torch.int64, device=scores.device)
    if n == 0 or k == 0 or c == 0:
        return out
    scores = scores if scores.stride(-1) == 1 else scores.contiguous()
    mask = valid_mask.to(torch.int8).contiguous() if valid_mask is not None else scores
    nv = num_valid.to(torch.int32).contiguous() if num_valid is not None else scores
    block_c = triton.next_power_of_2(c)
    # -- launch parameters: ~32 row elements per thread ------------------------------------------
    num_warps = max(1, min(16, block_c // 1024))
    _topk_kernel[(n,)](
        scores, mask, nv, out, c, k, scores.stride(0), mask.stride(0), out.stride(0),
        HAS_MASK=valid_mask is not None, HAS_NUM=num_valid is not None, BLOCK_C=block_c,
        BLOCK_OUT=triton.next_power_of_2(max(k, 1)), num_warps=num_warps,
    )
    return out
