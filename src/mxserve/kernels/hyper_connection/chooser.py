"""Choosing the hyper-connection ops' implementation (op "hc") once per model, with reasons.

The style of `mxserve.kernels.chooser`: a frozen `HyperConnectionSpec` says what the model needs;
candidates in priority order answer `is_supported(platform)` and `can_implement(spec)`. The
Triton candidate (hc_pre / hc_post / hc_head and the block RMS norms at once) is off unless forced
(`kernel_overrides={"hc": "triton"}` or `MXSERVE_KERNEL_OVERRIDES=hc=triton`) until it is
measured on the H200. `hc_ops(backend)` maps KernelSet slot names to implementations.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mxserve.kernels.chooser import Choice, Platform, ReferenceCandidate, choose_first, triton_cuda_support

HC_BACKENDS = ("reference", "triton")
MAX_HC = 16  # the Triton launchers' limit: comb is one [hc, hc] register tile of one program


@dataclass(frozen=True)
class HyperConnectionSpec:
    hc_mult: int  # parallel residual streams
    hidden_size: int  # D
    stream_dtype: str  # "bfloat16" or "float32"


class TritonHyperConnection:
    name = "triton"

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def is_supported(self, platform: Platform) -> tuple[bool, str]:
        return triton_cuda_support(platform, enabled=self.enabled, needs="the tested fp64 Triton path", off_reason=(
            "off by default until measured on the H200 (force with kernel_overrides {'hc': 'triton'})"))

    def can_implement(self, spec: HyperConnectionSpec) -> tuple[bool, str]:
        if not 1 <= spec.hc_mult <= MAX_HC:
            return False, f"hc_mult {spec.hc_mult} outside the kernels' 1..{MAX_HC}"
        if spec.stream_dtype not in ("bfloat16", "float32"):
            return False, f"streams in {spec.stream_dtype}, the kernels take bfloat16 or float32"
        return True, (f"fp64 mixes and Sinkhorn, 3 launches per hc_pre/hc_head and 1 per hc_post "
                      f"(hc {spec.hc_mult}, D {spec.hidden_size}, {spec.stream_dtype} streams)")


def hc_candidates(*, enable_triton: bool) -> list:
    return [TritonHyperConnection(enable_triton), ReferenceCandidate()]


def choose_hc(spec: HyperConnectionSpec, platform: Platform, *, forced: str | None = None) -> Choice:
    """First supported candidate that can implement `spec`, with the reasons for those passed over."""
    if forced not in (None, *HC_BACKENDS):
        raise ValueError(f"hc: unknown backend {forced!r}; known: {list(HC_BACKENDS)}")
    return choose_first("hc", hc_candidates(enable_triton=forced == "triton"), spec, platform, forced)


def hc_ops(backend: str) -> dict[str, Callable]:
    """KernelSet slot name → implementation for `backend` ("reference": empty, keep the defaults).
    The Triton launchers are imported here, only when that backend is chosen."""
    if backend == "reference":
        return {}
    if backend != "triton":
        raise ValueError(f"hc: unknown backend {backend!r}; known: {list(HC_BACKENDS)}")
    from mxserve.kernels.hyper_connection.triton import (
        hc_head_norm_triton,
        hc_head_triton,
        hc_post_triton,
        hc_pre_norm_triton,
        hc_pre_triton,
    )
    from mxserve.kernels.rms_norm.triton import rms_norm_triton

    # the block norms ride along: the same residual-stream glue, each one launch instead of ~10;
    # hc_pre / hc_head + norm fuse into fewer launches with MXSERVE_HC_FUSED=1 (triton.py)
    return {"hc_pre": hc_pre_triton, "hc_post": hc_post_triton, "hc_head": hc_head_triton,
            "rms_norm": rms_norm_triton, "hc_pre_norm": hc_pre_norm_triton, "hc_head_norm": hc_head_norm_triton}
