"""RoPE tables and the interleaved partial rotation of DeepSeek-V4 (spec §2).

Two tables exist: "main" (θ = rope_theta, no scaling) for sliding-only layers and the draft,
and "compress" (θ = compress_rope_theta with YaRN frequency interpolation, no mscale) for CSA/HCA
layers, their compressors and their indexers. Rotation pairs channels (2i, 2i+1) of the LAST
`rope_dim` channels (GPT-J style); the leading NoPE channels are untouched. Math in fp32.
"""

from __future__ import annotations

import math

import torch

from mxserve.config import AttentionKind, ModelConfig, YarnScaling


def _yarn_ramp_bounds(scaling: YarnScaling, rope_dim: int, base: float) -> tuple[float, float]:
    def correction_dim(num_rotations: float) -> float:
        return rope_dim * math.log(scaling.original_max_position_embeddings / (num_rotations * 2 * math.pi)) / (
            2 * math.log(base)
        )

    low = max(math.floor(correction_dim(scaling.beta_fast)), 0)
    high = min(math.ceil(correction_dim(scaling.beta_slow)), rope_dim - 1)
    return float(low), float(high)


def inverse_frequencies(rope_dim: int, base: float, scaling: YarnScaling | None) -> torch.Tensor:
    """f_i for i in [0, rope_dim/2): base^(-2i/rope_dim), YaRN-interpolated when `scaling` is set."""
    exponents = torch.arange(0, rope_dim, 2, dtype=torch.float64) / rope_dim
    freq = base**-exponents
    if scaling is not None:
        low, high = _yarn_ramp_bounds(scaling, rope_dim, base)
        if high == low:
            high += 0.001  # avoid a zero-width ramp
        ramp = ((torch.arange(rope_dim // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
        freq = freq * (1 - ramp) + (freq / scaling.factor) * ramp
    return freq.to(torch.float32)


class RopeTables:
    """The two frequency tables of a model, picked per attention kind."""

    def __init__(self, config: ModelConfig, device: torch.device | str = "cpu") -> None:
        """`device`: where the tables live (the model's): on a GPU, a CPU table would be copied to
        the device on every call, a host synchronisation that also breaks CUDA-graph capture.
        Computed on the CPU either way, so the values do not depend on the device."""
        self.rope_dim = config.qk_rope_head_dim
        self.main = inverse_frequencies(self.rope_dim, config.rope_theta, None).to(device)
        self.compress = inverse_frequencies(self.rope_dim, config.compress_rope_theta, config.rope_scaling).to(device)

    def for_kind(self, kind: AttentionKind) -> torch.Tensor:
        return self.main if kind is AttentionKind.SLIDING else self.compress


def apply_rope(x: torch.Tensor, positions: torch.Tensor, inv_freq: torch.Tensor, *, inverse: bool = False) -> torch.Tensor:
    """Rotate the last 2*len(inv_freq) channels of x by angle ±position*f_i, pairs (2i, 2i+1).

    x: [T, ..., d] any float dtype; positions: [T] int64 (absolute). Returns x's dtype.
    """
    rope_dim = 2 * inv_freq.numel()
    # The angle is an fp32 product, as the release reference and transformers compute it (this
    # matters at large positions); cos/sin of it are taken in fp64 and rounded once, because
    # vectorised fp32 transcendentals take a different code path for short tensors (the scalar
    # tail), so T=1 and T=96 could differ in the last bit.
    angles = positions.to(torch.float32)[:, None] * inv_freq.to(x.device)[None, :]  # [T, r/2]
    cos, sin = angles.double().cos().float(), angles.double().sin().float()
    if inverse:
        sin = -sin
    shape = [x.shape[0]] + [1] * (x.dim() - 2) + [rope_dim // 2]
    cos, sin = cos.view(shape), sin.view(shape)
    rope = x[..., -rope_dim:].float()
    even, odd = rope[..., 0::2], rope[..., 1::2]
    rotated = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)
    return torch.cat((x[..., :-rope_dim], rotated.to(x.dtype)), dim=-1)
