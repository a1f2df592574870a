"""Choosing the MoE block's implementation once per layer, with reasons (architecture §4).

Same shape as `mxserve.kernels.chooser` (linear): a frozen `MoESpec` says what a layer needs;
candidates in priority order answer `is_supported(platform)` and `can_implement(spec)`, each
with a reason; `choose_moe` returns the first that fits, naming the ones passed over. The
override op name is "moe" (`EngineConfig.kernel_overrides["moe"]`, or
`MXSERVE_KERNEL_OVERRIDES=moe=triton` through `parse_overrides_env`). Backends:

  reference        the torch twins (always available)
  triton           router + grouped MXFP4 kernels, weights widened to bf16 in registers; decode
                   in "triton-split"'s launches wherever they apply (the same bits, 3x faster at
                   1 token on the H200), prefill-sized calls in the prefill tile on the same experts
                   (variant "bf16-prefill", `prefill.py`: the same bits again)
  triton-fused     "triton" with the split decode and the prefill tile off (the fused kernel at every size)
  triton-w4a8      the same with FP8 activations on FP8 tensor cores (faithful numerics, sm_89+)
  triton-repack    experts repacked losslessly MXFP4 → 128x128 block FP8 at load (spec §6.6)
  triton-split     "triton"'s numbers bit for bit, decode in split launches with a cheaper nibble
                   decode (variant "bf16-split"; MXFP4 with scale bytes <= 128; issue 10, opt-in)
  triton-stream    "triton"'s numbers bit for bit, the stream decode (3 launches, every K-loop load
                   pipelined) at every size up to 512 pairs (variant "bf16-stream"; same conditions).
                   "triton" itself streams up to 32 pairs, where the H200 measured it faster than
                   the split decode (session 5); above that the split decode was faster
  triton-stream-splitk  "triton-stream" with the weights widened straight into the wgmma operand
                   registers (K split across programs optional, off as shipped; variant
                   "bf16-stream-splitk", `stream_splitk.py`; issue 10, opt-in), the prefill tile in the
                   same K order above its sizes: its own bits (other fp32 summation groups), the twin's
                   tolerance. MXSERVE_MOE_MMA_ORDER=1 gives "triton" this K order at every size

Triton is off unless forced until the issue-10 gates pass (docs/benchmarks.md, MoE section).
`moe_kernel_slots(backend)` gives the KernelSet slot callables (route, moe_experts, expert_ffn).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

from mxserve.kernels.chooser import (
    OVERRIDES_ENV,
    Choice,
    Platform,
    ReferenceCandidate,
    choose_first,
    triton_cuda_support,
)
from mxserve.kernels.moe.reference import ExpertWeights, expert_ffn_ref, moe_experts_ref, route_ref

MOE_BACKENDS = ("reference", "triton", "triton-fused", "triton-w4a8", "triton-repack", "triton-split",
                "triton-stream", "triton-stream-splitk")
W4A8_MAX_SPREAD = 14  # binades between a 128-K block's group scales that the W4A8 rescale keeps exact
MIN_SCALE_BYTE = 16  # below, the in-register widening leaves the bf16/fp32 normal range
MAX_SPLIT_SCALE_BYTE = 128  # "triton-split" multiplies by the bf16 2^(b-1): finite up to here


@dataclass(frozen=True)
class MoESpec:
    name: str  # the layer's checkpoint prefix, for the log
    num_experts: int
    hidden: int  # I (expert intermediate size)
    dim: int  # D
    layout: str | None  # routed experts: "mxfp4", "fp8_block" or None (full precision)
    quantize_inputs: bool  # faithful numerics (FP8 activation QAT)
    min_scale_byte: int  # smallest UE8M0 byte of the routed experts (255 if none)
    max_group_spread: int  # largest spread of 4 group scale bytes in a row's 128-K block (MXFP4)
    max_scale_byte: int = 0  # largest UE8M0 byte of the routed experts (0 if none)

    @classmethod
    def of(cls, name: str, experts: Sequence[ExpertWeights], *, quantize_inputs: bool) -> MoESpec:
        """Reads layout and scale statistics expert by expert (no stacked copy)."""
        from mxserve.kernels.moe.experts import packed_or_none, scale_spread

        hidden, dim = experts[0].w1.shape
        packed = [packed_or_none(getattr(ex, n)) for ex in experts for n in ("w1", "w3", "w2")]
        layouts = {None if q is None else q.layout.value for q in packed}
        if len(layouts) != 1 or None in layouts:
            return cls(name, len(experts), hidden, dim, None, quantize_inputs, 255, 0, 0)
        layout = layouts.pop()
        min_byte = min(int(q.scales.min()) for q in packed)
        max_byte = max(int(q.scales.max()) for q in packed)
        spread = max(scale_spread(q.scales) for q in packed) if layout == "mxfp4" else 0
        return cls(name, len(experts), hidden, dim, layout, quantize_inputs, min_byte, spread, max_byte)


class TritonMoE:
    """The Triton MoE block in one of its variants ("triton", "triton-w4a8", "triton-repack")."""

    def __init__(self, name: str, enabled: bool) -> None:
        self.name = name
        self.enabled = enabled

    def is_supported(self, platform: Platform) -> tuple[bool, str]:
        w4a8 = self.name == "triton-w4a8"
        return triton_cuda_support(
            platform, enabled=self.enabled,
            off_reason=(f"off by default until the issue-10 gates pass (force with kernel_overrides "
                        f"{{'moe': '{self.name}'}} or {OVERRIDES_ENV}=moe={self.name})"),
            min_capability=(8, 9) if w4a8 else (8, 0), needs="FP8 tensor cores" if w4a8 else "bf16 tensor cores")

    def can_implement(self, spec: MoESpec) -> tuple[bool, str]:
        if spec.layout not in ("mxfp4", "fp8_block"):
            return False, f"routed experts are {spec.layout or 'full precision'}, not MXFP4 / FP8 block"
        if spec.hidden % 128 or spec.dim % 128:
            return False, f"expert dims I={spec.hidden} D={spec.dim} are not multiples of 128"
        if spec.min_scale_byte < MIN_SCALE_BYTE:
            return False, f"a scale byte {spec.min_scale_byte} < {MIN_SCALE_BYTE} would widen to a subnormal"
        if self.name == "triton-w4a8":
            if not spec.quantize_inputs:
                return False, "W4A8 needs the faithful numerics (FP8 activations); exact mode keeps bf16/fp32"
            if spec.layout != "mxfp4":
                return False, f"W4A8 reads MXFP4 experts, these are {spec.layout}"
            if spec.max_group_spread > W4A8_MAX_SPREAD:
                return False, f"group scales span {spec.max_group_spread} > {W4A8_MAX_SPREAD} binades (lossy)"
            return True, f"{spec.num_experts} MXFP4 experts {spec.hidden}x{spec.dim}, W4A8 on FP8 tensor cores"
        if self.name in ("triton-split", "triton-stream", "triton-stream-splitk"):
            kind = self.name.removeprefix("triton-")
            if spec.layout != "mxfp4":
                return False, f"{kind} decode reads MXFP4 experts, these are {spec.layout}"
            if spec.max_scale_byte > MAX_SPLIT_SCALE_BYTE:
                return False, f"a scale byte {spec.max_scale_byte} > {MAX_SPLIT_SCALE_BYTE}: its bf16 factor overflows"
            return True, f"{spec.num_experts} MXFP4 experts {spec.hidden}x{spec.dim}, {kind} decode launches"
        if self.name == "triton-repack":
            if spec.layout != "mxfp4":
                return False, f"repack reads MXFP4 experts, these are {spec.layout}"
            return True, f"{spec.num_experts} experts repacked MXFP4 -> FP8 block, widened to bf16"
        return True, f"{spec.num_experts} {spec.layout} experts {spec.hidden}x{spec.dim}, widened to bf16 in registers"


def moe_candidates(forced: str | None) -> list:
    names = ("triton-w4a8", "triton", "triton-fused", "triton-repack", "triton-split", "triton-stream",
             "triton-stream-splitk")
    return [TritonMoE(name, forced == name) for name in names] + [ReferenceCandidate()]


def choose_moe(spec: MoESpec, platform: Platform, *, forced: str | None = None) -> Choice:
    """The first candidate that is supported and can implement `spec`, with its reason and the
    reasons the ones before it were passed over. `forced` (from the overrides) turns one Triton
    variant on (layers it cannot implement fall back to the reference, with the reason);
    "reference" leaves only the reference."""
    if forced not in (None, *MOE_BACKENDS):
        raise ValueError(f"moe: unknown backend {forced!r}; known: {list(MOE_BACKENDS)}")
    return choose_first(f"moe {spec.name}", moe_candidates(forced), spec, platform, forced)


def moe_kernel_slots(backend: str, *, shared_backend: str = "reference") -> dict[str, Callable]:
    """KernelSet slots {route, moe_experts, expert_ffn} for a chosen MoE backend; each keeps its
    reference's signature. `shared_backend` "triton" runs the shared expert on `linear_fp8_block`'s
    Triton kernel (needs FP8 block shared-expert weights), "reference" on the torch twin."""
    if backend not in MOE_BACKENDS:
        raise ValueError(f"moe: unknown backend {backend!r}; known: {list(MOE_BACKENDS)}")
    if shared_backend not in ("reference", "triton"):
        raise ValueError(f"moe: {shared_backend=} must be 'reference' or 'triton'")
    if backend == "reference":
        slots = {"route": route_ref, "moe_experts": moe_experts_ref}
    else:
        from mxserve.kernels.moe.experts import moe_experts_triton
        from mxserve.kernels.moe.router import route_triton

        variant = {"triton-w4a8": "w4a8", "triton-split": "bf16-split", "triton-fused": "bf16-fused",
                   "triton-stream": "bf16-stream", "triton-stream-splitk": "bf16-stream-splitk"}.get(
            backend, "bf16")
        experts_fn = partial(moe_experts_triton, variant=variant, repack_fp8=backend == "triton-repack")
        slots = {"route": route_triton, "moe_experts": experts_fn}
    if shared_backend == "triton":
        from mxserve.kernels.moe.shared import expert_ffn_fp8

        slots["expert_ffn"] = expert_ffn_fp8
    else:
        slots["expert_ffn"] = expert_ffn_ref
    return slots
