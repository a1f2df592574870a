"""Choosing a kernel implementation once per layer, with reasons (docs/architecture.md §4).

A frozen `LinearSpec` describes what one linear layer needs (formats, shape, block, device).
Candidates, in priority order, answer `is_supported(platform)` and `can_implement(spec)`, each
with a reason. `choose_linear` runs once per layer at load; the engine logs the result. Overrides
come from `EngineConfig.kernel_overrides` (op → backend), whose environment front door,
`MXSERVE_KERNEL_OVERRIDES="linear=triton,moe=reference"`, is parsed here and nowhere else. The
reference is always available. Triton candidates are off unless forced (`enable_triton`) until
they pass their gates (issue 9; measured status in docs/benchmarks.md).
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from mxserve.formats import QuantizedWeight, WeightLayout

OVERRIDES_ENV = "MXSERVE_KERNEL_OVERRIDES"


@dataclass(frozen=True)
class Platform:
    device_type: str  # "cpu" or "cuda"
    capability: tuple[int, int] | None  # CUDA compute capability, None off CUDA
    is_rocm: bool
    has_triton: bool  # the optional dependency is importable

    @classmethod
    def probe(cls, device: torch.device) -> Platform:
        capability = torch.cuda.get_device_capability(device) if device.type == "cuda" else None
        return cls(device.type, capability, torch.version.hip is not None,
                   importlib.util.find_spec("triton") is not None)


@dataclass(frozen=True)
class LinearSpec:
    name: str  # the layer's checkpoint prefix, for the log
    out_features: int
    in_features: int
    layout: str | None  # "fp8_block", "mxfp4" or None (full precision)
    fmt: str | None  # code format name ("e4m3fn", "e4m3fnuz", ...)
    block: tuple[int, int] | None  # elements per scale
    quantize_input: bool  # W8A8 (faithful numerics) or weight-only

    @classmethod
    def of(cls, name: str, weight: object, *, quantize_input: bool) -> LinearSpec:
        if isinstance(weight, QuantizedWeight):
            out_f, in_f = weight.shape[-2:]
            return cls(name, out_f, in_f, weight.layout.value, weight.fmt.name, tuple(weight.block), quantize_input)
        out_f, in_f = weight.shape[-2:]
        return cls(name, out_f, in_f, None, None, None, False)


@dataclass(frozen=True)
class Choice:
    backend: str
    reason: str


class ReferenceLinear:
    name = "reference"

    def is_supported(self, platform: Platform) -> tuple[bool, str]:
        return True, "torch reference runs everywhere"

    def can_implement(self, spec: LinearSpec) -> tuple[bool, str]:
        return True, "the spec itself (fp64 accumulation)"


class TritonFp8BlockLinear:
    """`linear_fp8_block` backend="triton": FP8_BLOCK weights, 128x128 scales, on a CUDA GPU."""

    name = "triton"

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def is_supported(self, platform: Platform) -> tuple[bool, str]:
        if not self.enabled:
            return False, (f"off by default until the issue-9 gates pass (force with kernel_overrides "
                           f"{{'linear': 'triton'}} or {OVERRIDES_ENV}=linear=triton)")
        if not platform.has_triton:
            return False, "triton is not installed"
        if platform.device_type != "cuda" or platform.is_rocm:
            return False, f"needs an NVIDIA GPU, device is {platform.device_type}{' (ROCm)' if platform.is_rocm else ''}"
        if platform.capability < (8, 0):
            return False, f"needs sm_80+ for bf16 tensor cores, got sm_{platform.capability[0]}{platform.capability[1]}"
        return True, f"CUDA sm_{platform.capability[0]}{platform.capability[1]}"

    def can_implement(self, spec: LinearSpec) -> tuple[bool, str]:
        if spec.layout != WeightLayout.FP8_BLOCK.value:
            return False, f"layout {spec.layout or 'full precision'} is not fp8_block"
        if spec.block != (128, 128):
            return False, f"scale block {spec.block} is not 128x128"
        if spec.fmt not in ("e4m3fn", "e4m3fnuz"):
            return False, f"code format {spec.fmt} is not e4m3fn/e4m3fnuz"
        mode = "W8A8 on FP8 tensor cores" if spec.quantize_input else "weight-only, codes widened to bf16"
        return True, f"{spec.out_features}x{spec.in_features} fp8_block {spec.fmt}, {mode}"


def linear_candidates(*, enable_triton: bool) -> list:
    return [TritonFp8BlockLinear(enable_triton), ReferenceLinear()]


def choose_linear(spec: LinearSpec, platform: Platform, *, forced: str | None = None) -> Choice:
    """The first candidate that is supported and can implement `spec`, with its reason and the
    reasons the ones before it were passed over. `forced` (from the overrides): "triton" turns the
    Triton candidate on (layers it cannot implement still get the reference, with the reason);
    "reference" leaves only the reference."""
    if forced not in (None, "triton", "reference"):
        raise ValueError(f"linear: unknown backend {forced!r}; known: ['reference', 'triton']")
    candidates = linear_candidates(enable_triton=forced == "triton")
    if forced == "reference":
        candidates = [c for c in candidates if c.name == "reference"]
    passed_over = []
    for cand in candidates:
        ok, why = cand.is_supported(platform)
        if ok:
            ok, why = cand.can_implement(spec)
        if ok:
            prefix = "forced; " if forced == cand.name else ""
            skipped = f" (passed over: {'; '.join(passed_over)})" if passed_over else ""
            return Choice(cand.name, prefix + why + skipped)
        passed_over.append(f"{cand.name}: {why}")
    raise ValueError(f"linear {spec.name}: no implementation fits ({'; '.join(passed_over)})")


def parse_overrides_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """`MXSERVE_KERNEL_OVERRIDES="linear=triton,moe=reference"` → {"linear": "triton", "moe": "reference"}."""
    text = (os.environ if environ is None else environ).get(OVERRIDES_ENV, "").strip()
    overrides = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        op, sep, backend = item.partition("=")
        if not sep or not op.strip() or not backend.strip():
            raise ValueError(f"{OVERRIDES_ENV}: {item!r} is not op=backend (whole value {text!r})")
        overrides[op.strip()] = backend.strip()
    return overrides
