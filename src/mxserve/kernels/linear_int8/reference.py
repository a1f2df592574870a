"""Torch twin of the INT8 W8A8 linear (the spec the Triton kernel matches bit for bit).

Quantization (both sides symmetric, per row): scale = amax / 127 in fp32 (1 for an all-zero
row), code = round_half_even(value / scale) clamped to [-127, 127]. The product: the exact
integer dot (float64 here, exact for integers below 2^53; int32 in the kernel, exact while K·127² < 2^31, i.e. K < 133,144),
converted to fp32 once (round to nearest), times the token's scale, times the channel's scale.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

MAX_K = (2**31 - 1) // (127 * 127)  # int32 accumulation stays exact below this


@dataclass(frozen=True, eq=False)
class Int8Weight:
    codes: torch.Tensor  # int8 [N, K], row-major
    scales: torch.Tensor  # fp32 [N], one per output channel

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.codes.shape)  # type: ignore[return-value]

    def dequantize(self) -> torch.Tensor:
        return self.codes.float() * self.scales[:, None]

    def to(self, device: torch.device | str) -> Int8Weight:
        return Int8Weight(self.codes.to(device), self.scales.to(device))


def _quantize_rows(v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    v = v.float()
    amax = v.abs().amax(dim=-1) if v.shape[-1] else v.new_zeros(v.shape[:-1])
    scales = torch.where(amax > 0, amax / 127.0, torch.ones_like(amax))
    codes = torch.round(v / scales[..., None]).clamp_(-127, 127).to(torch.int8)
    return codes, scales


def quantize_weight_int8(w: torch.Tensor) -> Int8Weight:
    """A float weight [N, K] as per-channel symmetric INT8."""
    if w.dim() != 2:
        raise ValueError(f"quantize_weight_int8 needs [N, K], got {tuple(w.shape)=}")
    codes, scales = _quantize_rows(w)
    return Int8Weight(codes.contiguous(), scales.contiguous())


def quantize_activation_int8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [M, K] float → (codes int8 [M, K], scales fp32 [M]), per token."""
    if x.dim() != 2:
        raise ValueError(f"quantize_activation_int8 needs x [M, K], got {tuple(x.shape)=}")
    return _quantize_rows(x)


def check_int8_weight(weight: object, k: int) -> Int8Weight:
    if not isinstance(weight, Int8Weight):
        raise TypeError(f"linear_int8 needs an Int8Weight, got {type(weight).__name__}")
    n, wk = weight.shape
    if weight.codes.dtype != torch.int8 or weight.scales.dtype != torch.float32 or tuple(weight.scales.shape) != (n,):
        raise ValueError(f"linear_int8: weight must be int8 codes [N, K] and fp32 scales [N], got "
                         f"{weight.codes.dtype=} {weight.scales.dtype=} {tuple(weight.scales.shape)=}")
    if wk != k:
        raise ValueError(f"linear_int8: x has {k} features, weight {weight.shape=}")
    if k >= MAX_K:
        raise ValueError(f"linear_int8: K={k} would overflow the exact int32 accumulation (K < {MAX_K})")
    return weight


def linear_int8_ref(x: torch.Tensor, weight: Int8Weight) -> torch.Tensor:
    """x [..., K] float · W[N, K]ᵀ → fp32 [..., N], x quantized per token first."""
    k = x.shape[-1]
    check_int8_weight(weight, k)
    n = weight.shape[0]
    x2 = x.reshape(-1, k)
    if x2.shape[0] == 0:
        return x.new_zeros((*x.shape[:-1], n), dtype=torch.float32)
    codes, xs = quantize_activation_int8(x2)
    # exact: |products| <= 127², sums < 2^53 for K < 5.5e11 in float64 (CUDA has no int64 matmul)
    acc = codes.double() @ weight.codes.double().t()
    out = (acc.float() * xs[:, None]) * weight.scales[None, :]
    return out.reshape(*x.shape[:-1], n)
