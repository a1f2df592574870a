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
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from mxserve.formats import QuantizedWeight, WeightLayout

OVERRIDES_ENV = "MXSERVE_KERNEL_OVERRIDES"
# every op forced to its Triton kernels: what the H200 benchmarks and GPU tests run (on CUDA the
# defaults are the reference kernels until each Triton path passes its gates)
ALL_TRITON: Mapping[str, str] = {"linear": "triton", "moe": "triton", "attention": "triton", "hc": "triton"}
logger = logging.getLogger("mxserve.kernels")


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
    groups: int = 1  # > 1: a block-diagonal grouped projection (wo_a) of `groups` row blocks

    @classmethod
    def of(cls, name: str, weight: object, *, quantize_input: bool, groups: int = 1) -> LinearSpec:
        if isinstance(weight, QuantizedWeight):
            out_f, in_f = weight.shape[-2:]
            return cls(name, out_f, in_f, weight.layout.value, weight.fmt.name, tuple(weight.block), quantize_input,
                       groups)
        out_f, in_f = weight.shape[-2:]
        fmt = str(weight.dtype).removeprefix("torch.") if isinstance(weight, torch.Tensor) else None
        return cls(name, out_f, in_f, None, fmt, None, False, groups)


@dataclass(frozen=True)
class Choice:
    backend: str
    reason: str


class ReferenceCandidate:
    """The torch reference of any op: always supported, implements every spec."""

    name = "reference"

    def is_supported(self, platform: Platform) -> tuple[bool, str]:
        return True, "torch reference runs everywhere"

    def can_implement(self, spec: object) -> tuple[bool, str]:
        return True, "the spec itself (fp64 accumulation)"



def triton_cuda_support(platform: Platform, *, enabled: bool, off_reason: str,
                        min_capability: tuple[int, int] = (8, 0), needs: str = "bf16 tensor cores") -> tuple[bool, str]:
    """`is_supported` of a Triton candidate: switched on, triton importable, an NVIDIA GPU of at
    least `min_capability`."""
    if not enabled:
        return False, off_reason
    if not platform.has_triton:
        return False, "triton is not installed"
    if platform.device_type != "cuda" or platform.is_rocm:
        return False, f"needs an NVIDIA GPU, device is {platform.device_type}{' (ROCm)' if platform.is_rocm else ''}"
    sm = f"sm_{platform.capability[0]}{platform.capability[1]}"
    if platform.capability < min_capability:
        return False, f"needs sm_{min_capability[0]}{min_capability[1]}+ for {needs}, got {sm}"
    return True, f"CUDA {sm}"


def choose_first(op: str, candidates: list, spec: object, platform: Platform, forced: str | None) -> Choice:
    """The first candidate that is supported and can implement `spec`, with its reason and the
    reasons the ones before it were passed over. `forced` == "reference" leaves only the reference;
    a forced candidate's reason starts with "forced; ". `op` names the layer in the error."""
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
    raise ValueError(f"{op}: no implementation fits ({'; '.join(passed_over)})")


class TritonFp8BlockLinear:
    """backend="triton": `linear_fp8_block` / `grouped_linear` on FP8_BLOCK weights with 128x128
    scales, and `linear_bf16` on bf16 weights, on a CUDA GPU."""

    name = "triton"

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def is_supported(self, platform: Platform) -> tuple[bool, str]:
        return triton_cuda_support(platform, enabled=self.enabled, off_reason=(
            f"off by default until the issue-9 gates pass (force with kernel_overrides "
            f"{{'linear': 'triton'}} or {OVERRIDES_ENV}=linear=triton)"))

    def can_implement(self, spec: LinearSpec) -> tuple[bool, str]:
        if spec.layout is None and spec.fmt == "bfloat16" and spec.groups == 1:
            return True, f"{spec.out_features}x{spec.in_features} bf16 weight (linear_bf16, bf16 tensor cores)"
        if spec.layout != WeightLayout.FP8_BLOCK.value:
            return False, f"layout {spec.layout or 'full precision'} ({spec.fmt}) is not fp8_block or bf16"
        if spec.block != (128, 128):
            return False, f"scale block {spec.block} is not 128x128"
        if spec.fmt not in ("e4m3fn", "e4m3fnuz"):
            return False, f"code format {spec.fmt} is not e4m3fn/e4m3fnuz"
        if spec.groups > 1 and (spec.out_features % spec.groups or (spec.out_features // spec.groups) % 128):
            return False, f"{spec.groups} groups of {spec.out_features}/{spec.groups} rows: not whole 128-row blocks"
        if spec.groups > 1:
            return True, f"grouped {spec.groups}x({spec.out_features // spec.groups}x{spec.in_features}) fp8_block, weight-only"
        mode = ("W8A8 on FP8 tensor cores" if spec.quantize_input
                else "weight-only, codes widened to fp16, activations pow2-scaled to fp16")
        return True, f"{spec.out_features}x{spec.in_features} fp8_block {spec.fmt}, {mode}"


def linear_candidates(*, enable_triton: bool) -> list:
    return [TritonFp8BlockLinear(enable_triton), ReferenceCandidate()]


def choose_linear(spec: LinearSpec, platform: Platform, *, forced: str | None = None) -> Choice:
    """The first candidate that is supported and can implement `spec`, with its reason and the
    reasons the ones before it were passed over. `forced` (from the overrides): "triton" turns the
    Triton candidate on (layers it cannot implement still get the reference, with the reason);
    "reference" leaves only the reference."""
    if forced not in (None, "triton", "reference"):
        raise ValueError(f"linear: unknown backend {forced!r}; known: ['reference', 'triton']")
    return choose_first(f"linear {spec.name}", linear_candidates(enable_triton=forced == "triton"), spec, platform,
                        forced)


def parse_overrides_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """`MXSERVE_KERNEL_OVERRIDES="linear=triton,moe=reference"` → {"linear": "triton", "moe": "reference"}."""
    return parse_overrides((os.environ if environ is None else environ).get(OVERRIDES_ENV, ""), OVERRIDES_ENV)


def parse_overrides(text: str, source: str = "--kernel-overrides") -> dict[str, str]:
    """"linear=triton,moe=reference" → {"linear": "triton", "moe": "reference"}; "all-triton" → every
    op's Triton backend (`ALL_TRITON`). ValueError naming `source` for an item that is not op=backend
    (the ops and backends themselves are checked by `EngineConfig`)."""
    text = text.strip()
    if text == "all-triton":
        return dict(ALL_TRITON)
    overrides = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        op, sep, backend = item.partition("=")
        if not sep or not op.strip() or not backend.strip():
            raise ValueError(f"{source}: {item!r} is not op=backend (whole value {text!r})")
        overrides[op.strip()] = backend.strip()
    return overrides


class LinearDispatcher:
    """The per-layer backends, decided once at load, behind `linear_ref`'s signature.

    Built from the loaded weights and the chooser's `Choice` per weight name; maps each weight
    object (by identity: the model holds the very objects the loader produced) to its callable.
    e4m3fnuz weights chosen for Triton are converted to e4m3fn once, here (exact). A weight it
    was not built with (a path added later) runs the reference and is logged once — never a
    silent change of backend. `grouped` is the same for the block-diagonal wo_a projection.
    """

    def __init__(self, weights: Mapping[str, object], choices: Mapping[str, Choice]) -> None:
        self._by_id: dict[int, tuple[str, str, object]] = {}  # id(weight) → (name, backend, prepared weight)
        self._keep = []  # the original weights, so ids stay unique while this lives
        for name, choice in choices.items():
            weight = weights[name]
            prepared = weight
            if choice.backend == "triton" and isinstance(weight, QuantizedWeight):
                from mxserve.kernels.linear_fp8_block.triton import to_ocp_weight

                prepared = to_ocp_weight(weight)
            self._by_id[id(weight)] = (name, choice.backend, prepared)
            self._keep.append(weight)
        self._unknown_logged: set[tuple] = set()

    def backend_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for _name, backend, _w in self._by_id.values():
            counts[backend] = counts.get(backend, 0) + 1
        return counts

    def label(self) -> str:
        return ", ".join(f"{b} x{n}" for b, n in sorted(self.backend_counts().items()))

    def triton_layers(self) -> list[tuple[str, object]]:
        """(name, prepared weight) of every layer that runs a Triton kernel (for `mxserve verify`)."""
        return [(name, w) for name, backend, w in self._by_id.values() if backend == "triton"]

    def _lookup(self, weight: object) -> tuple[str, object]:
        entry = self._by_id.get(id(weight))
        if entry is None:
            key = tuple(getattr(weight, "shape", ()))
            if key not in self._unknown_logged:
                self._unknown_logged.add(key)
                logger.warning("linear dispatcher: a %s weight not seen at load runs the reference", key)
            return "reference", weight
        return entry[1], entry[2]

    def __call__(self, x: torch.Tensor, weight: object, *, quantize_input: bool = False,
                 out_dtype: torch.dtype | None = None) -> torch.Tensor:
        backend, w = self._lookup(weight)
        if backend != "triton":
            from mxserve.kernels.linear.reference import linear_ref

            return linear_ref(x, weight, quantize_input=quantize_input, out_dtype=out_dtype)
        return self.linear_impl(x, w, quantize_input, out_dtype)

    @staticmethod
    def linear_impl(x: torch.Tensor, w: object, quantize_input: bool, out_dtype: torch.dtype | None = None
                    ) -> torch.Tensor:
        """The Triton linear on an already prepared weight; `out_dtype` rounded by the launch itself."""
        if isinstance(w, QuantizedWeight):
            from mxserve.kernels.linear_fp8_block.triton import linear_fp8_block_triton

            return linear_fp8_block_triton(x, w, quantize_input=quantize_input, out_dtype=out_dtype)
        from mxserve.kernels.linear_bf16.triton import linear_bf16_triton

        return linear_bf16_triton(x, w, out_dtype=out_dtype)  # full-precision weights: never activation-quantized

    def grouped(self, x: torch.Tensor, weight: object, *, out_dtype: torch.dtype | None = None) -> torch.Tensor:
        backend, w = self._lookup(weight)
        if backend != "triton":
            from mxserve.kernels.linear.reference import grouped_linear_ref

            return grouped_linear_ref(x, weight, out_dtype=out_dtype)
        return self.grouped_impl(x, w, out_dtype)

    @staticmethod
    def grouped_impl(x: torch.Tensor, w: object, out_dtype: torch.dtype | None = None) -> torch.Tensor:
        from mxserve.kernels.linear_fp8_block.triton import grouped_linear_fp8_block_triton

        return grouped_linear_fp8_block_triton(x, w, out_dtype=out_dtype)

    def compare_with_reference(self, *, rows: int = 4, seed: int = 0) -> list[tuple[str, str, float]]:
        """(layer, variant, normwise relative error) of every Triton layer against the torch
        reference on random activations: weight-only for every layer, W8A8 too for FP8 layers
        (`mxserve verify`'s kernels stage)."""
        import torch as _torch

        from mxserve.kernels.linear.reference import grouped_linear_ref, linear_ref

        results = []
        gen = _torch.Generator().manual_seed(seed)
        for name, backend, w in self._by_id.values():
            if backend != "triton":
                continue
            out_f, in_f = w.shape
            device = w.device
            if name.endswith(".wo_a"):
                groups = next(g for g in range(16, 0, -1) if out_f % g == 0 and (out_f // g) % 128 == 0)
                x = _torch.randn(rows, groups, in_f, generator=gen).to(device).bfloat16()
                cases = [("grouped", self.grouped_impl(x, w), grouped_linear_ref(x, w))]
            else:
                x = _torch.randn(rows, in_f, generator=gen).to(device).bfloat16()
                cases = [("weight-only", self.linear_impl(x, w, False), linear_ref(x, w))]
                if isinstance(w, QuantizedWeight):
                    cases.append(("w8a8", self.linear_impl(x, w, True), linear_ref(x, w, quantize_input=True)))
            for variant, out, ref in cases:
                err = float((out.double() - ref.double()).norm() / ref.double().norm().clamp(min=1e-300))
                results.append((name, variant, err))
        return results
