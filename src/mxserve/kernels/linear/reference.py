"""Torch reference for a linear layer on a full-precision or quantized weight (the spec).

y = x · Wᵀ with W dequantized on the fly from its packed form (codes + UE8M0 scales) for this
call only, so no BF16/FP32 copy of a quantized weight stays resident. With `quantize_input`
the activation first goes through the FP8 QAT simulation (per token, per 128 channels,
power-of-two scales) that the faithful numerics apply before every FP8/FP4 GEMM.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mxserve.formats import QuantizedWeight, fake_quant_fp8_pow2


@dataclass(frozen=True, eq=False)
class ResidentWeight:
    """A weight decoded once into fp64 and kept resident (the "reference-resident" choice).

    Same values as decoding `source` per call, so results are bit-identical to the per-call
    reference; it trades memory (8 bytes per parameter) for not re-decoding every weight every
    step, which is what makes small models usable on a CPU. `source` is the packed weight (None
    for a full-precision one), so quantized-ness — and with it the faithful mode's activation
    quantization — is preserved.
    """

    source: QuantizedWeight | None
    values: torch.Tensor  # fp64 [out, in]

    @classmethod
    def of(cls, weight: torch.Tensor | QuantizedWeight) -> ResidentWeight:
        if isinstance(weight, QuantizedWeight):
            return cls(weight, weight.dequantize(torch.float32).double())
        return cls(None, weight.double())

    @property
    def shape(self) -> torch.Size:
        return self.values.shape

    @property
    def is_quantized(self) -> bool:
        return self.source is not None


Weight = torch.Tensor | QuantizedWeight | ResidentWeight

_ROWS_PER_CHUNK = 8192  # output rows per fp64 matmul


def weight_shape(weight: Weight) -> tuple[int, int]:
    return tuple(weight.shape)  # type: ignore[return-value]


def dequantized(weight: Weight) -> torch.Tensor:
    """fp32 view of a weight for one computation (never cached)."""
    if isinstance(weight, ResidentWeight):
        return weight.values.float()
    if isinstance(weight, QuantizedWeight):
        return weight.dequantize(torch.float32)
    return weight.float()


def is_quantized(weight: Weight) -> bool:
    return isinstance(weight, QuantizedWeight) or (isinstance(weight, ResidentWeight) and weight.is_quantized)


def linear_ref(x: torch.Tensor, weight: Weight, *, quantize_input: bool = False,
               out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """x [..., in] (any float dtype) · weight [out, in]ᵀ → fp32 [..., out], or `out_dtype`.

    `quantize_input` applies the FP8 activation QAT (block 128) first; it only makes sense for
    a quantized weight and is ignored for full-precision ones (the release keeps those unquantized).
    `out_dtype` (None: fp32) rounds the fp32 result once with `.to(out_dtype)` — the contract the
    kernels' output-dtype epilogues reproduce bit for bit (the callers' former `.to(sd)`).
    """
    return _linear_fp32(x, weight, quantize_input).to(out_dtype or torch.float32)


def _linear_fp32(x: torch.Tensor, weight: Weight, quantize_input: bool) -> torch.Tensor:
    out_features, in_features = weight_shape(weight)
    if x.shape[-1] != in_features:
        raise ValueError(f"linear: {x.shape=} does not match weight in_features={in_features}")
    if quantize_input and is_quantized(weight):
        x = fake_quant_fp8_pow2(x, block=128)
    flat = x.reshape(-1, in_features).float()
    if flat.shape[0] == 0:
        return flat.new_zeros((*x.shape[:-1], out_features))
    w = weight.values if isinstance(weight, ResidentWeight) else dequantized(weight)
    flat64 = flat.double()
    out = torch.empty(flat.shape[0], out_features, dtype=torch.float32, device=flat.device)
    for start in range(0, out_features, _ROWS_PER_CHUNK):  # bounds the transient fp64 weight copy
        stop = min(start + _ROWS_PER_CHUNK, out_features)
        out[:, start:stop] = (flat64 @ w[start:stop].double().t()).float()
    return out.reshape(*x.shape[:-1], out_features)


def grouped_linear_ref(x: torch.Tensor, weight: Weight, *, out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """Block-diagonal grouped projection (the attention's wo_a, spec §3.4.6).

    x [T, G, K]; weight [G·R, K] whose rows g·R … (g+1)·R − 1 form group g → fp32 [T, G, R].
    It is G separate [R, K] matmuls, not one dense (G·K → G·R) product. The release reference
    runs wo_a on a BF16 copy without activation quantization, so this op has no QAT switch.
    `out_dtype` (None: fp32) rounds the fp32 result once with `.to(out_dtype)`, as `linear_ref`.
    """
    _num_tokens, groups, in_per_group = x.shape
    out_rows, in_features = weight_shape(weight)
    if in_features != in_per_group or out_rows % groups:
        raise ValueError(f"grouped_linear: {x.shape=} does not fit weight {(out_rows, in_features)} in {groups} groups")
    w = weight.values if isinstance(weight, ResidentWeight) else dequantized(weight).double()
    out = torch.einsum("tgk,grk->tgr", x.double(), w.view(groups, out_rows // groups, in_per_group)).float()
    return out.to(out_dtype or torch.float32)
