"""The engine's kernel choices, made once at load and folded into the model's KernelSet.

Here, below the distributed layer, so the single-process engine and every tensor-parallel rank
(over its own shards) choose with the same code. Linear: `choose_linear_per_layer` (one
`choose_linear` per weight) and `linear_dispatch_set` (the `LinearDispatcher` slots); the engine
decides whether linear runs per layer at all (`build_engine_model`). MoE, attention and the
hyper-connections: `with_moe_and_attention`, the other chooser-driven ops with the same front door
(`EngineConfig.kernel_overrides`, else `MXSERVE_KERNEL_OVERRIDES="moe=triton,attention=triton,hc=triton"`)
and the same rule: the reference is the default, a forced Triton backend is chosen per layer where
it can implement the layer, and each choice is logged with its reason.

* moe: `choose_moe` per layer (`MoESpec` of that layer's experts). When every layer picks one
  backend its slots are used directly; otherwise `MoEDispatcher` maps each layer's gate / expert
  tuple (by identity) to its backend. The Triton experts stack (copy) a layer's expert weights on
  first use (`kernels.moe.experts.stacked_for`): the startup line says so, because it doubles the
  routed-expert memory until the loader stacks once at load.
* attention: one `choose_attention` for the model (every fused attention op of issue 11 at once).
* hc: one `choose_hc` for the model (the hc_pre / hc_post / hc_head slots at once).

Interpreter allowance: the Triton candidates refuse a non-CUDA platform. With `TRITON_INTERPRET=1`
on the CPU (the test suite), a *forced* Triton backend is allowed anyway, its `can_implement`
still applies, and the reason says "interpreter allowance" — never without the force and never
silently. The interpreter is for correctness tests only; it is orders of magnitude slower.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence

import torch

from mxserve.config import ModelConfig
from mxserve.kernels.attention_chooser import AttentionSpec, TritonAttention, attention_ops, choose_attention
from mxserve.kernels.chooser import Choice, LinearDispatcher, LinearSpec, Platform, choose_linear
from mxserve.kernels.hyper_connection import (
    HC_BACKENDS,
    HyperConnectionSpec,
    TritonHyperConnection,
    choose_hc,
    hc_ops,
)
from mxserve.kernels.moe.chooser import MOE_BACKENDS, MoESpec, TritonMoE, choose_moe, moe_kernel_slots
from mxserve.kernels.moe.experts import packed_or_none
from mxserve.kernels.moe.reference import route_ref
from mxserve.kernels.triton_switch import interpreting
from mxserve.model.deepseek_v4 import DeepseekV4Model
from mxserve.model.kernel_set import REFERENCE_KERNELS, KernelSet

logger = logging.getLogger("mxserve.engine")  # the engine's startup log (moved here from mxserve.engine)

ATTENTION_BACKENDS = ("reference", "triton")


def interpreter_allowed(platform: Platform) -> bool:
    """Forced Triton may run on the CPU only under the Triton interpreter (tests)."""
    return platform.device_type == "cpu" and platform.has_triton and interpreting()


def _with_allowance(choice: Choice, forced: str | None, candidate, spec, platform: Platform) -> Choice:
    """`choice`, or — when a Triton backend was forced, refused only for not being on CUDA, and the
    interpreter allowance holds — that backend with a reason saying so."""
    if forced in (None, "reference") or choice.backend == forced or not interpreter_allowed(platform):
        return choice
    ok, why = candidate.can_implement(spec)
    if not ok:
        return choice  # the layer cannot be implemented at all: the reference, with the chooser's reason
    return Choice(forced, f"forced; TRITON_INTERPRET=1 interpreter allowance on the CPU (tests only, slow); {why}")


def _short_default(choice: Choice, forced: str | None, op: str) -> Choice:
    """The unforced reference choice with a one-line reason (the passed-over list says only "off")."""
    if forced is None and choice.backend == "reference":
        return Choice("reference", f"default; Triton is off unless forced (kernel_overrides {{'{op}': ...}} or "
                                   f"MXSERVE_KERNEL_OVERRIDES={op}=...)")
    return choice


def check_backend(op: str, backend: str | None, known: Sequence[str]) -> None:
    if backend is not None and backend not in known:
        raise ValueError(f"{op}: unknown backend {backend!r}; known: {list(known)}")


# ---------------------------------------------------------------------------------------------- linear
def choose_linear_per_layer(weights: Mapping[str, object], platform: Platform, *, o_groups: int, faithful: bool,
                            forced: str | None) -> dict[str, Choice]:
    """Weight name → Choice for every 2-D weight (one `choose_linear` each); logs the counts and,
    for each backend, its distinct reasons (a layer Triton cannot implement says why).
    `o_groups`: the wo_a groups this model instance multiplies at once (a rank's own groups)."""
    choices = {}
    for name, w in weights.items():
        if isinstance(w, torch.Tensor) and w.dim() != 2:
            continue
        groups = o_groups if name.endswith(".wo_a") else 1  # block-diagonal wo_a
        spec = LinearSpec.of(name, w, quantize_input=faithful and groups == 1, groups=groups)
        choices[name] = choose_linear(spec, platform, forced=forced)
        logger.debug("linear %s: %s (%s)", name, choices[name].backend, choices[name].reason)
    counts: dict[str, int] = {}
    reasons: dict[tuple[str, str], int] = {}
    for c in choices.values():
        counts[c.backend] = counts.get(c.backend, 0) + 1
        reasons[(c.backend, c.reason)] = reasons.get((c.backend, c.reason), 0) + 1
    logger.info("linear kernel choices per layer: %s", counts)
    for (backend, reason), n in sorted(reasons.items()):
        if backend == "reference":  # why Triton was passed over (the Triton reasons name each shape)
            logger.info("linear reference x%d: %s", n, reason)
    return choices


def linear_dispatch_set(weights: Mapping[str, object], choices: Mapping[str, Choice]) -> KernelSet:
    """A KernelSet whose linear and grouped_linear slots dispatch each weight (by identity: pass
    the very objects the model binds) to its chosen backend."""
    dispatcher = LinearDispatcher(weights, choices)
    label = f"per layer: {dispatcher.label()}"
    return KernelSet(linear=dispatcher, grouped_linear=dispatcher.grouped, labels={"linear": label, "grouped_linear": label})


# ---------------------------------------------------------------------------------------------- attention
def choose_model_attention(model, platform: Platform, forced: str | None, max_model_len: int) -> Choice:
    check_backend("attention", forced, ATTENTION_BACKENDS)
    cfg = model.config
    spec = AttentionSpec(head_dim=cfg.head_dim, rope_dim=cfg.qk_rope_head_dim,
                         kv_cache_mode=str(model.policy.kv_cache_dtype.value), index_head_dim=cfg.index_head_dim,
                         max_indexer_candidates=max(1, max_model_len // cfg.compress_rate_csa))
    choice = _short_default(choose_attention(spec, platform, forced=forced), forced, "attention")
    return _with_allowance(choice, forced, TritonAttention(True), spec, platform)


# ---------------------------------------------------------------------------------------------- hc
def choose_model_hc(model, platform: Platform, forced: str | None) -> Choice:
    check_backend("hc", forced, HC_BACKENDS)
    cfg = model.config
    spec = HyperConnectionSpec(hc_mult=cfg.hc_mult, hidden_size=cfg.hidden_size,
                               stream_dtype=str(model.policy.stream_dtype).removeprefix("torch."))
    choice = _short_default(choose_hc(spec, platform, forced=forced), forced, "hc")
    return _with_allowance(choice, forced, TritonHyperConnection(True), spec, platform)


# ---------------------------------------------------------------------------------------------- moe
class MoEDispatcher:
    """Per-layer MoE backends behind the `route` / `moe_experts` slot signatures.

    Keys are the identities of each layer's gate weight and expert tuple (the model passes those
    very objects on every call). An object it was not built with runs the reference, logged once."""

    def __init__(self, layers: Sequence[tuple[str, object]], backends: Mapping[str, str]) -> None:
        self._route: dict[int, Callable] = {}
        self._experts: dict[int, Callable] = {}
        self._keep = []  # the keyed objects, so their ids stay unique while this lives
        for name, moe in layers:
            slots = moe_kernel_slots(backends[name])
            self._route[id(moe.gate)] = slots["route"]
            self._experts[id(moe.experts)] = slots["moe_experts"]
            self._keep += [moe.gate, moe.experts]
        self._unknown_logged = False

    def _unknown(self) -> None:
        if not self._unknown_logged:
            self._unknown_logged = True
            logger.warning("moe dispatcher: a layer not seen at load runs the reference")

    def route(self, x: torch.Tensor, gate_weight: torch.Tensor, **kwargs):
        fn = self._route.get(id(gate_weight))
        if fn is None:
            self._unknown()
            fn = route_ref
        return fn(x, gate_weight, **kwargs)

    def moe_experts(self, x, expert_ids, weights, experts, **kwargs):
        fn = self._experts.get(id(experts))
        if fn is None:
            self._unknown()
            fn = moe_kernel_slots("reference")["moe_experts"]
        return fn(x, expert_ids, weights, experts, **kwargs)


def choose_model_moe(model, platform: Platform, forced: str | None) -> dict[str, Choice]:
    """Layer prefix → Choice for every MoE layer of `model` (after it is built: the keys of the
    dispatcher are the model's own objects)."""
    check_backend("moe", forced, MOE_BACKENDS)
    faithful = model.policy.quantize_gemm_inputs
    choices = {}
    for i, layer in enumerate(model.layers):
        name = f"layers.{i}.ffn"
        moe = layer[5]
        spec = MoESpec.of(name, moe.experts, quantize_inputs=faithful)
        choice = _short_default(choose_moe(spec, platform, forced=forced), forced, "moe")
        if forced is not None and forced != "reference":
            choice = _with_allowance(choice, forced, TritonMoE(forced, True), spec, platform)
        choices[name] = choice
    return choices


def _shared_backend(model, moe_backends: set[str], linear_forced: str | None) -> tuple[str, str]:
    """The shared expert runs on the FP8 GEMM family's Triton kernel only with linear=triton, a
    Triton MoE and FP8-block shared weights on CUDA; otherwise its torch twin."""
    if linear_forced != "triton" or moe_backends == {"reference"}:
        return "reference", "torch twin (Triton needs linear=triton and a Triton MoE)"
    shared = [layer[5].shared for layer in model.layers if layer[5].shared is not None]
    packed = [packed_or_none(getattr(s, n)) for s in shared for n in ("w1", "w2", "w3")]
    if not packed or any(q is None or q.layout.value != "fp8_block" for q in packed):
        return "reference", "shared-expert weights are not FP8 block"
    if packed[0].device.type != "cuda":
        return "reference", f"shared-expert weights are on {packed[0].device.type}, not CUDA"
    return "triton", "linear_fp8_block Triton kernel"


# ---------------------------------------------------------------------------------------------- the set
def with_moe_and_attention(model, base: KernelSet, *, device: torch.device, overrides: Mapping[str, str],
                           max_model_len: int) -> KernelSet:
    """`base` (the linear choices) plus the chosen MoE, attention and hc slots; logs each choice once."""
    platform = Platform.probe(device)
    slots: dict[str, Callable] = {}
    labels = dict(base.labels)

    attention = choose_model_attention(model, platform, overrides.get("attention"), max_model_len)
    logger.info("attention backend: %s (%s)", attention.backend, attention.reason)
    attention_slots = attention_ops(attention.backend)  # empty for the reference: keep the defaults
    slots.update(attention_slots)
    labels.update({op: attention.backend for op in attention_slots})

    hc = choose_model_hc(model, platform, overrides.get("hc"))
    logger.info("hc backend: %s (%s)", hc.backend, hc.reason)
    hc_slots = hc_ops(hc.backend)  # empty for the reference: keep the defaults
    slots.update(hc_slots)
    labels.update({op: hc.backend for op in hc_slots})

    moe_choices = choose_model_moe(model, platform, overrides.get("moe"))
    backends = {name: c.backend for name, c in moe_choices.items()}
    distinct = set(backends.values())
    for name, c in moe_choices.items():
        logger.debug("moe %s: %s (%s)", name, c.backend, c.reason)
    stacking = (" — the Triton experts copy each layer's expert weights into stacked tensors on first use "
                "(routed-expert memory doubles until stacking moves to load time)") if distinct - {"reference"} else ""
    if len(distinct) == 1:
        backend = distinct.pop()
        reason = next(iter(moe_choices.values())).reason if moe_choices else "no MoE layers"
        logger.info("moe backend: %s for all %d layers (%s)%s", backend, len(moe_choices), reason, stacking)
        moe_slots = moe_kernel_slots(backend)
        moe_label = backend
    else:
        counts = {b: list(backends.values()).count(b) for b in sorted(set(backends.values()))}
        reasons = {c.backend: c.reason for c in moe_choices.values()}
        logger.info("moe backend per layer: %s (%s)%s", counts, "; ".join(f"{b}: {r}" for b, r in reasons.items()),
                    stacking)
        dispatcher = MoEDispatcher([(f"layers.{i}.ffn", layer[5]) for i, layer in enumerate(model.layers)], backends)
        moe_slots = {"route": dispatcher.route, "moe_experts": dispatcher.moe_experts}
        moe_label = "per layer: " + ", ".join(f"{b} x{n}" for b, n in counts.items())
    shared, shared_why = _shared_backend(model, set(backends.values()), overrides.get("linear"))
    moe_slots["expert_ffn"] = moe_kernel_slots("reference", shared_backend=shared)["expert_ffn"]
    if moe_label != "reference" or shared != "reference":
        logger.info("moe shared expert: %s (%s)", shared, shared_why)
    slots.update(moe_slots)
    if moe_label != "reference":
        labels.update(route=moe_label, moe_experts=moe_label)
    if shared != "reference":
        labels["expert_ffn"] = shared
    return dataclasses.replace(base, **slots, labels=labels)


def resolve_overrides(config_overrides: Mapping[str, str], environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """`EngineConfig.kernel_overrides` over the `MXSERVE_KERNEL_OVERRIDES` front door, validated:
    ValueError naming the op or backend and what is known (the config validates its own; the
    environment's are checked here, once)."""
    from mxserve.config.engine_config import KERNEL_BACKENDS
    from mxserve.kernels.chooser import OVERRIDES_ENV, parse_overrides_env

    from_env = parse_overrides_env(environ)
    for op, backend in from_env.items():
        if op not in KERNEL_BACKENDS:
            raise ValueError(f"{OVERRIDES_ENV}: unknown op {op!r}; known ops: {sorted(KERNEL_BACKENDS)}")
        if backend not in KERNEL_BACKENDS[op]:
            raise ValueError(f"{OVERRIDES_ENV}: {op}={backend!r}: unknown backend; available: {list(KERNEL_BACKENDS[op])}")
    return {**from_env, **config_overrides}


# ---------------------------------------------------------------------------------------------- the engine's model
RESIDENT_LIMIT_BYTES = 4 << 30  # decode weights once at load when the fp64 copy stays below this


def build_engine_model(model_config: ModelConfig, weights: Mapping[str, object], *, device: torch.device,
                       numerics: str, kv_cache_dtype: str | None, overrides: Mapping[str, str],
                       max_model_len: int) -> tuple[DeepseekV4Model, str]:
    """`DeepseekV4Model` with exactly the kernels the single-process engine runs: `LLMEngine` and
    `mxserve bench layers` both build their model here, so the benchmark times what serving runs.

    `overrides`: already resolved (`resolve_overrides`: config over MXSERVE_KERNEL_OVERRIDES).
    Linear: forced `triton` → `choose_linear_per_layer` + `linear_dispatch_set`; another forced
    backend → that; unforced → resident decoded fp64 weights for small models on the CPU
    ("reference-resident"), else the reference decoding per call. Then `with_moe_and_attention`.
    Every choice is logged once. Returns (model, linear backend name)."""
    forced = overrides.get("linear")
    num_params = sum(w.shape[0] * w.shape[1] if not isinstance(w, torch.Tensor) else w.numel() for w in weights.values())
    resident_bytes = 8 * num_params
    linear = REFERENCE_KERNELS
    if forced == "triton":
        choices = choose_linear_per_layer(weights, Platform.probe(device), o_groups=model_config.o_groups,
                                          faithful=numerics == "faithful", forced=forced)
        linear = linear_dispatch_set(weights, choices)
        backend, why = "triton", "forced; per-layer choices above (layers Triton cannot implement run the reference)"
    elif forced is not None:
        backend, why = forced, "forced by kernel_overrides"
    elif device.type == "cpu" and resident_bytes <= RESIDENT_LIMIT_BYTES:
        backend, why = "reference-resident", f"CPU and {resident_bytes / 2**20:.0f} MiB decoded fit"
    elif device.type != "cpu":
        backend, why = "reference", f"decode per call on {device.type}"
    else:
        backend, why = "reference", f"decode per call ({resident_bytes / 2**30:.1f} GiB decoded would not fit)"
    logger.info("linear backend: %s (%s)", backend, why)
    model = DeepseekV4Model(model_config, weights, numerics=numerics, kv_cache_dtype=kv_cache_dtype,
                            resident_weights=backend == "reference-resident", kernels=linear)
    model.set_kernels(with_moe_and_attention(model, model.kernels, device=device, overrides=overrides,
                                             max_model_len=max_model_len))
    return model, backend
