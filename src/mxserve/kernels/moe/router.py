"""Triton launcher of the MoE router: `route_triton`, the same contract as `route_ref`.

Bit-equal to the twin (indices and weights) by construction, see `_router_kernel.py`. Runs on a
CUDA tensor, or anywhere under TRITON_INTERPRET=1 (CI).
"""

from __future__ import annotations

import os

import torch
import triton

from mxserve.kernels.moe._router_kernel import _gate_logits_kernel, _route_select_kernel

_X_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
MAX_EXPERTS = 1024  # one token's scores live in one program's registers


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def check_device(t: torch.Tensor, op: str) -> None:
    if t.device.type != "cuda" and not interpreting():
        raise ValueError(f"{op} triton backend needs a CUDA tensor or TRITON_INTERPRET=1, got {t.device=}")


def gate_logits_triton(x: torch.Tensor, gate_weight: torch.Tensor) -> torch.Tensor:
    """x [T, D] · gate [E, D]ᵀ accumulated in fp64, rounded to fp32 → [T, E] (`linear_ref`'s bits)."""
    check_device(x, "route")
    if x.dim() != 2 or gate_weight.dim() != 2 or x.shape[1] != gate_weight.shape[1]:
        raise ValueError(f"route: x [T, D] and gate [E, D] needed, got {tuple(x.shape)=} {tuple(gate_weight.shape)=}")
    if x.dtype not in _X_DTYPES or gate_weight.dtype not in _X_DTYPES:
        raise ValueError(f"route: float x and gate needed, got {x.dtype=} {gate_weight.dtype=}")
    if x.device != gate_weight.device:
        raise ValueError(f"route: {x.device=} but {gate_weight.device=}")
    x, gate_weight = x.contiguous(), gate_weight.contiguous()
    num_tokens, dim = x.shape
    num_experts = gate_weight.shape[0]
    out = torch.empty((num_tokens, num_experts), dtype=torch.float32, device=x.device)
    if num_tokens == 0 or num_experts == 0:
        return out
    # --- launch parameters: fixed, never a function of the token count (batch invariance) ---
    block_t, block_e, block_d = 4, 16, 32
    # ------------------------------------------------------------------------------------------
    grid = (triton.cdiv(num_tokens, block_t), triton.cdiv(num_experts, block_e))
    _gate_logits_kernel[grid](
        x, gate_weight, out, num_tokens, num_experts, dim,
        x.stride(0), gate_weight.stride(0), out.stride(0),
        BLOCK_T=block_t, BLOCK_E=block_e, BLOCK_D=block_d,
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
    logits = gate_logits_triton(x, gate_weight)
    num_tokens = x.shape[0]
    weights = torch.empty((num_tokens, top_k), dtype=torch.float32, device=x.device)
    ids = torch.empty((num_tokens, top_k), dtype=torch.int64, device=x.device)
    if num_tokens == 0:
        return weights, ids
    # --- launch parameters ---------------------------------------------------------------------
    block_e = triton.next_power_of_2(num_experts)
    block_t = max(1, min(16, 4096 // block_e))  # rows per program: ~4K fp64 scores in registers
    kpad = triton.next_power_of_2(top_k)
    # ------------------------------------------------------------------------------------------
    scaling = _scaling_tensor(routed_scaling, x.device)
    dummy = logits  # unused pointer slots
    if is_hash:
        tid2eid = tid2eid.contiguous()
        table, toks, bias_arg, stride_h = tid2eid, token_ids.contiguous(), dummy, tid2eid.stride(0)
    else:
        table, toks, bias_arg, stride_h = dummy, dummy, bias.float().contiguous(), 0
    _route_select_kernel[(triton.cdiv(num_tokens, block_t),)](
        logits, bias_arg, table, toks, scaling, weights, ids,
        num_tokens, num_experts, logits.stride(0), stride_h,
        TOP_K=top_k, BLOCK_T=block_t, BLOCK_E=block_e, KPAD=kpad,
        HASH=is_hash, USE_LIBDEVICE=not interpreting(),
    )
    return weights, ids
