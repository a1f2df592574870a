"""Launcher of the block-scaled FP8 linear Triton kernel: validates, picks launch parameters, launches.

Paths (the kernel file says why its arithmetic is ordered the way it is):
- weight-only: x (fp32/bf16/fp16) times FP8 codes widened in registers to bf16 (exact). bf16 x
  feeds the bf16 tensor cores as is; fp32/fp16 x is split into hi + lo bf16 pieces (two dots),
  which keeps ~16 significant bits of x instead of bf16's 8.
- W8A8 (`quantize_input`): x is quantized per token per 128 channels to e4m3fn codes with
  power-of-two scales (`quantize_activation_fp8_block`, equal to the faithful fake quantization)
  and the dot runs on FP8 tensor cores where the device has them (sm_89+), else both sides are
  widened to bf16 (exact products).
- FNUZ (e4m3fnuz) weights: the codes are widened through their 256-entry value table (exact,
  no conversion pass). To use the native e4m3fn conversion and FP8 tensor cores instead, convert
  once at load with `to_ocp_weight`, which is the formats' lossless OCP<->FNUZ conversion.
- Under TRITON_INTERPRET=1 (CPU tests) each block's dot is an fp32 product-and-sum: the
  interpreter's bf16 dot is wrong (seen with triton 3.9), and numpy's fp32 matmul sums in an
  order that changes with the tile shape; the product-sum tests the same indexing, masking,
  scale folding and group order, bit-reproducibly across M.
"""

from __future__ import annotations

import os

import torch
import triton

from mxserve.formats import E4M3FN, QuantizedWeight, decode_table, fp8_fnuz_to_ocp
from mxserve.kernels.linear_fp8_block._linear_fp8_block_kernel import (
    _linear_fp8_block_kernel,
    _sum_groups_kernel,
)
from mxserve.kernels.linear_fp8_block.reference import (
    BLOCK_K,
    check_fp8_block_weight,
    quantize_activation_fp8_block,
)

DECODE_MAX_M = 16  # rows up to which the GEMV tile (16 tokens x BLOCK_N features, split-K grid) runs
# (BLOCK_N, num_warps, num_stages) of the decode tile; measured choice in docs/benchmarks.md
DECODE_TILE = (64, 4, 4)
_FEW_PROGRAMS = 264  # below this many output tiles (2 per H200 SM) the GEMM tile also splits K
_GROUP_TARGET_PROGRAMS = 512  # decode programs the K grouping aims at (~4 per H200 SM)
_X_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
_luts: dict[tuple[str, str], torch.Tensor] = {}


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def has_fp8_tensor_cores(device: torch.device) -> bool:
    """NVIDIA sm_89+ (Ada, Hopper, Blackwell) multiply e4m3 x e4m3 natively."""
    if device.type != "cuda" or torch.version.hip is not None:
        return False
    return torch.cuda.get_device_capability(device) >= (8, 9)


def kb_per_group(n: int, k: int) -> int:
    """128-K blocks per summation group: a function of the layer shape only (never of M or the
    device), so every launch of a layer adds the same partial sums in the same order. Enough
    groups that the decode grid (64-feature tiles x groups) reaches ~512 programs."""
    num_kb = triton.cdiv(k, BLOCK_K)
    n_tiles = triton.cdiv(n, 64)
    groups = max(1, min(num_kb, _GROUP_TARGET_PROGRAMS // n_tiles))
    return triton.cdiv(num_kb, groups)


def to_ocp_weight(weight: QuantizedWeight) -> QuantizedWeight:
    """An e4m3fnuz weight as the equal-valued e4m3fn one (codes kept, scale bytes - 1); raises
    ValueError where no exact conversion exists (FNUZ ±240 codes, scale byte 0). Call at load."""
    check_fp8_block_weight(weight)
    if weight.fmt == E4M3FN:
        return weight
    codes, scales = fp8_fnuz_to_ocp(weight.codes, weight.scales)
    return QuantizedWeight.from_fp8_block(codes, scales, weight.block, E4M3FN)


def _lut(weight: QuantizedWeight) -> torch.Tensor:
    key = (weight.fmt.name, str(weight.device))
    if key not in _luts:
        _luts[key] = decode_table(weight.fmt, weight.device)
    return _luts[key]


def linear_fp8_block_triton(
    x: torch.Tensor,
    weight: QuantizedWeight,
    *,
    quantize_input: bool = False,
    tile: str = "auto",
    weight_decode: str = "auto",
) -> torch.Tensor:
    """x [..., K] · W[N, K]ᵀ → fp32 [..., N] (see `linear_fp8_block_ref` for the contract).

    `tile`: "auto" (GEMV tile for M <= 16, GEMM tile above), "decode" or "prefill" to force one.
    `weight_decode`: "auto" (native e4m3fn conversion for e4m3fn, value table otherwise) or "lut".
    """
    weight = check_fp8_block_weight(weight)
    n, k = weight.shape
    if x.dtype not in _X_DTYPES:
        raise ValueError(f"linear_fp8_block: x must be one of {_X_DTYPES}, got {x.dtype=}")
    if x.shape[-1] != k:
        raise ValueError(f"linear_fp8_block: {x.shape=} does not match weight in_features {k} ({weight.shape=})")

    lead = x.shape[:-1]
    x2 = x.reshape(-1, k)
    if x2.stride(1) != 1:
        x2 = x2.contiguous()  # the kernel reads 128 contiguous channels per block
    if quantize_input and x2.shape[0]:
        x_codes, x_scales = quantize_activation_fp8_block(x2)
        out = launch_linear_fp8_block(x_codes, weight, x_scales=x_scales, tile=tile, weight_decode=weight_decode)
    else:
        out = launch_linear_fp8_block(x2, weight, tile=tile, weight_decode=weight_decode)
    return out.reshape(*lead, n)


def launch_linear_fp8_block(
    x_op: torch.Tensor,
    weight: QuantizedWeight,
    *,
    x_scales: torch.Tensor | None = None,
    tile: str = "auto",
    weight_decode: str = "auto",
) -> torch.Tensor:
    """The kernel on a 2-D operand: float x [M, K], or (W8A8) e4m3fn codes x_op uint8 [M, K] with
    `x_scales` fp32 [M, ceil(K/128)] as `quantize_activation_fp8_block` makes them. → fp32 [M, N].
    Public so benchmarks can time the GEMM apart from the activation quantization."""
    weight = check_fp8_block_weight(weight)
    n, k = weight.shape
    x_fp8 = x_scales is not None
    if x_op.device != weight.device:
        raise ValueError(f"linear_fp8_block: {x_op.device=} but {weight.device=}")
    if weight.codes.stride() != (k, 1):
        raise ValueError(f"linear_fp8_block: weight codes must be row-major contiguous, got {weight.codes.stride()=}")
    if weight.scales.stride(-1) != 1:
        raise ValueError(f"linear_fp8_block: scale rows must be contiguous, got {weight.scales.stride()=}")
    if tile not in ("auto", "decode", "prefill"):
        raise ValueError(f"linear_fp8_block: {tile=} must be 'auto', 'decode' or 'prefill'")
    if weight_decode not in ("auto", "lut"):
        raise ValueError(f"linear_fp8_block: {weight_decode=} must be 'auto' or 'lut'")
    if x_op.device.type != "cuda" and not interpreting():
        raise ValueError(f"linear_fp8_block triton backend needs a CUDA tensor or TRITON_INTERPRET=1, got {x_op.device=}")
    if x_op.dim() != 2 or x_op.shape[1] != k or x_op.stride(1) != 1:
        raise ValueError(f"linear_fp8_block: x must be [M, {k}] with unit channel stride, got {x_op.shape=} {x_op.stride()=}")
    if x_fp8 and (x_op.dtype != torch.uint8 or x_scales.dtype != torch.float32
                  or tuple(x_scales.shape) != (x_op.shape[0], triton.cdiv(k, BLOCK_K)) or x_scales.stride(1) != 1):
        raise ValueError(
            f"linear_fp8_block: W8A8 needs uint8 codes and fp32 scales [M, ceil(K/128)] with unit stride, got "
            f"{x_op.dtype=} {x_scales.dtype=} {tuple(x_scales.shape)=} {x_scales.stride()=}"
        )
    if not x_fp8 and x_op.dtype not in _X_DTYPES:
        raise ValueError(f"linear_fp8_block: x must be one of {_X_DTYPES}, got {x_op.dtype=}")
    m = x_op.shape[0]
    out = torch.empty((m, n), dtype=torch.float32, device=x_op.device)
    if m == 0 or n == 0:
        return out
    quantize_input = x_fp8
    if x_scales is None:
        x_scales = out  # unused (X_FP8 False): any pointer will do
    x = x_op

    # --- launch parameters ---------------------------------------------------------------------
    use_lut = weight_decode == "lut" or weight.fmt != E4M3FN
    if interpreting():
        dot = 0  # fp32 product-sum: the interpreter's bf16 dot is wrong
    elif quantize_input and not use_lut and has_fp8_tensor_cores(x.device):
        dot = 2  # e4m3 x e4m3 on FP8 tensor cores
    else:
        dot = 1  # widen to bf16 (exact for FP8 codes and bf16 x)
    x_pieces = 1 if (quantize_input or x_op.dtype == torch.bfloat16) else 2
    is_decode = tile == "decode" or (tile == "auto" and m <= DECODE_MAX_M)
    group = kb_per_group(n, k)
    num_groups = triton.cdiv(triton.cdiv(k, BLOCK_K), group)
    if is_decode:
        block_m = 16
        block_n, num_warps, num_stages = DECODE_TILE
    elif interpreting():
        block_m, block_n, num_warps, num_stages = 32, 64, 4, 1  # the interpreter caps tensors at 2^20
    else:
        # a second (group) accumulator on a 128x128 tile spills registers: 64 rows then
        block_m = 128 if (m > 64 and num_groups == 1) else 64
        block_n, num_warps, num_stages = 128, 8, (4 if dot == 2 else 3)
    # spread K over programs (same groups, so the same bits) where the output tiles are too few
    num_tiles = triton.cdiv(n, block_n) * triton.cdiv(m, block_m)
    split_grid = num_groups > 1 and (is_decode or num_tiles < _FEW_PROGRAMS)
    # --------------------------------------------------------------------------------------------

    dest = torch.empty((num_groups, m, n), dtype=torch.float32, device=x.device) if split_grid else out
    grid = (triton.cdiv(n, block_n), triton.cdiv(m, block_m), num_groups if split_grid else 1)
    lut = _lut(weight) if use_lut else weight.scales  # unused pointer when not use_lut
    _linear_fp8_block_kernel[grid](
        x_op, x_scales, weight.codes, weight.scales, lut, dest,
        m, n, k,
        x_op.stride(0), x_scales.stride(0), weight.codes.stride(0), weight.scales.stride(0),
        dest.stride(0) if split_grid else 0, n,
        group,
        BLOCK_M=block_m, BLOCK_N=block_n, GROUPS_PER_PROGRAM=1 if split_grid else 0, ONE_GROUP=num_groups == 1,
        X_FP8=quantize_input, X_PIECES=x_pieces, DOT=dot, W_LUT=use_lut,
        num_warps=num_warps, num_stages=num_stages,
    )
    if split_grid:
        block = 1024
        _sum_groups_kernel[(triton.cdiv(m * n, block),)](
            dest, out, m * n, dest.stride(0), NUM_GROUPS=num_groups, BLOCK=block
        )
    return out
