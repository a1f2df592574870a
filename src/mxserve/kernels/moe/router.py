"""Triton launcher of the MoE router: `route_triton`, the same contract as `route_ref`.

Bit-equal to the twin (indices and weights) by construction, see `_router_kernel.py`. Two launches
per call: fp64 gate partials over D-chunks (enough programs to fill the GPU at one token), then one
program per token sums them in a fixed order and selects. Runs on a CUDA tensor, or anywhere under
TRITON_INTERPRET=1 (CI).
"""

from __future__ import annotations

import torch
import triton

from mxserve.kernels.early_start import early_start_launch
from mxserve.kernels.moe._router_kernel import (
    _gate_logits_kernel,
    _gate_partials_kernel,
    _route_select_kernel,
)
from mxserve.kernels.triton_switch import interpreting

_X_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
MAX_EXPERTS = 1024  # one token's scores live in one program's registers

# --- gate launch parameters: fixed, never a function of the token count (batch invariance) --------
GATE_BLOCK_T = 8  # tokens per program: each gate element converted to fp64 serves 8 tokens
GATE_BLOCK_E = 16  # experts per program
GATE_BLOCK_D = 64  # 8 lanes x one 16-byte load of 8 bf16 per row
GATE_SUB_BLOCKS = 4  # sub-blocks per program, summed in-thread: a chunk of 256 of D (16 at D = 4096)
GATE_CHUNK = GATE_SUB_BLOCKS * GATE_BLOCK_D
GATE_NUM_WARPS = 4  # 150 registers (Triton 3.6), 176 (3.9), no spills: 2-3 programs per SM
LOGITS_BLOCK_T, LOGITS_BLOCK_E = 4, 128  # the partials → fp32 logits sum (element-wise: any tile)
MAX_TOKENS_PER_PASS = 1024  # bounds the fp64 partials: splits x 1024 x E x 8 bytes (32 MiB at Flash)
# ----------------------------------------------------------------------------------------------------


def check_device(t: torch.Tensor, op: str) -> None:
    if t.device.type != "cuda" and not interpreting():
        raise ValueError(f"{op} triton backend needs a CUDA tensor or TRITON_INTERPRET=1, got {t.device=}")


def num_splits(dim: int) -> int:
    """D-chunks of the gate partials (at least one, so D = 0 gives zero logits)."""
    return max(1, triton.cdiv(dim, GATE_CHUNK))


def select_num_warps(num_experts: int) -> int:
    """Warps of one select program (one token): two experts per thread, 4 warps at E = 256. One warp
    would keep the k argmaxes free of barriers, but a lone warp is latency-bound on the fp64
    softplus (3488 SASS instructions for 256 experts against 1384 per warp with 4)."""
    return min(8, max(1, triton.next_power_of_2(num_experts) // 64))


def _checked_gate_inputs(x: torch.Tensor, gate_weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    check_device(x, "route")
    if x.dim() != 2 or gate_weight.dim() != 2 or x.shape[1] != gate_weight.shape[1]:
        raise ValueError(f"route: x [T, D] and gate [E, D] needed, got {tuple(x.shape)=} {tuple(gate_weight.shape)=}")
    if x.dtype not in _X_DTYPES or gate_weight.dtype not in _X_DTYPES:
        raise ValueError(f"route: float x and gate needed, got {x.dtype=} {gate_weight.dtype=}")
    if x.device != gate_weight.device:
        raise ValueError(f"route: {x.device=} but {gate_weight.device=}")
    return x.contiguous(), gate_weight.contiguous()


def _token_passes(num_tokens: int) -> list[tuple[int, int]]:
    """[start, stop) token ranges of at most MAX_TOKENS_PER_PASS: every token is computed by the same
    tiles in any pass, so splitting a large batch changes no bits."""
    return [(start, min(start + MAX_TOKENS_PER_PASS, num_tokens))
            for start in range(0, num_tokens, MAX_TOKENS_PER_PASS)]


def _gate_partials(x: torch.Tensor, gate_weight: torch.Tensor) -> torch.Tensor:
    """fp64 partials [num_splits(D), T, E] of x [T, D] · gate [E, D]ᵀ, T >= 1 (contiguous inputs)."""
    num_tokens, dim = x.shape
    num_experts = gate_weight.shape[0]
    splits = num_splits(dim)
    part = torch.empty((splits, num_tokens, num_experts), dtype=torch.float64, device=x.device)
    grid = (triton.cdiv(num_tokens, GATE_BLOCK_T), triton.cdiv(num_experts, GATE_BLOCK_E), splits)
    _gate_partials_kernel[grid](
        x, gate_weight, part, num_tokens, num_experts, dim, x.stride(0), gate_weight.stride(0),
        BLOCK_T=GATE_BLOCK_T, BLOCK_E=GATE_BLOCK_E, BLOCK_D=GATE_BLOCK_D, SUB_BLOCKS=GATE_SUB_BLOCKS,
        num_warps=GATE_NUM_WARPS, **early_start_launch(),
    )
    return part


def gate_logits_triton(x: torch.Tensor, gate_weight: torch.Tensor) -> torch.Tensor:
    """x [T, D] · gate [E, D]ᵀ accumulated in fp64, rounded to fp32 → [T, E] (`linear_ref`'s bits)."""
    x, gate_weight = _checked_gate_inputs(x, gate_weight)
    num_tokens, num_experts = x.shape[0], gate_weight.shape[0]
    out = torch.empty((num_tokens, num_experts), dtype=torch.float32, device=x.device)
    if num_tokens == 0 or num_experts == 0:
        return out
    for start, stop in _token_passes(num_tokens):
        part = _gate_partials(x[start:stop], gate_weight)
        rows = out[start:stop]
        grid = (triton.cdiv(stop - start, LOGITS_BLOCK_T), triton.cdiv(num_experts, LOGITS_BLOCK_E))
        _gate_logits_kernel[grid](
            part, rows, stop - start, num_experts, rows.stride(0),
            NUM_SPLITS=part.shape[0], BLOCK_T=LOGITS_BLOCK_T, BLOCK_E=LOGITS_BLOCK_E,
        )
    return out


_SCALINGS: dict[tuple[float, str], torch.Tensor] = {}


def _scaling_tensor(value: float, device: torch.device) -> torch.Tensor:
    """The routed scaling as a device fp64 scalar, made once per (value, device): building it per
    call is a host-to-device copy, a sync that kept the decode step out of CUDA graphs."""
    key = (float(value), str(device))
    if key not in _SCALINGS:
        _SCALINGS[key] = torch.tensor([value], dtype=torch.float64, device=device)
    return _SCALINGS[key]


def route_triton(
    x: torch.Tensor,
    gate_weight: torch.Tensor,
    *,
    top_k: int,
    routed_scaling: float,
    bias: torch.Tensor | None = None,
    tid2eid: torch.Tensor | None = None,
    token_ids: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """x [T, D] → (weights fp32 [T, k], expert ids int64 [T, k]); see `route_ref`."""
    if (bias is None) == (tid2eid is None):
        raise ValueError("route: pass exactly one of bias (learned routing) or tid2eid (hash routing)")
    num_experts = gate_weight.shape[0]
    if not 1 <= top_k <= num_experts or num_experts > MAX_EXPERTS:
        raise ValueError(f"route: need 1 <= {top_k=} <= num_experts={num_experts} <= {MAX_EXPERTS}")
    is_hash = tid2eid is not None
    if is_hash:
        if token_ids is None:
            raise ValueError("route: hash routing needs token_ids")
        if tid2eid.dim() != 2 or tid2eid.shape[1] != top_k or tid2eid.device != x.device:
            raise ValueError(f"route: tid2eid must be [V, {top_k=}] on {x.device}, got {tuple(tid2eid.shape)} "
                             f"on {tid2eid.device}")
        if token_ids.shape != (x.shape[0],) or token_ids.device != x.device:
            raise ValueError(f"route: token_ids must be [{x.shape[0]}] on {x.device}, got {tuple(token_ids.shape)}")
    elif bias.shape != (num_experts,) or bias.device != x.device:
        raise ValueError(f"route: bias must be [{num_experts}] on {x.device}, got {tuple(bias.shape)} on {bias.device}")
    x, gate_weight = _checked_gate_inputs(x, gate_weight)
    num_tokens = x.shape[0]
    weights = torch.empty((num_tokens, top_k), dtype=torch.float32, device=x.device)
    ids = torch.empty((num_tokens, top_k), dtype=torch.int64, device=x.device)
    if num_tokens == 0:
        return weights, ids
    # --- select launch parameters: one token per program, a function of the expert count only ----------
    block_e = triton.next_power_of_2(num_experts)
    select_warps = select_num_warps(num_experts)
    kpad = triton.next_power_of_2(top_k)
    # ------------------------------------------------------------------------------------------------
    scaling = _scaling_tensor(routed_scaling, x.device)
    if is_hash:
        tid2eid, token_ids = tid2eid.contiguous(), token_ids.contiguous()
        bias_arg, stride_h = weights, tid2eid.stride(0)  # weights: an unused pointer slot
    else:
        bias_arg, stride_h = bias.float().contiguous(), 0
    for start, stop in _token_passes(num_tokens):
        part = _gate_partials(x[start:stop], gate_weight)
        table, toks = (tid2eid, token_ids[start:stop]) if is_hash else (part, part)  # part: unused slots
        _route_select_kernel[(stop - start,)](
            part, bias_arg, table, toks, scaling, weights[start:stop], ids[start:stop],
            stop - start, num_experts, stride_h,
            NUM_SPLITS=part.shape[0], TOP_K=top_k, BLOCK_T=1, BLOCK_E=block_e, KPAD=kpad,
            HASH=is_hash, USE_LIBDEVICE=not interpreting(), num_warps=select_warps, **early_start_launch(),
        )
    return weights, ids
