"""Stage `layers` (the `kernels` stage is `mxserve.verify.stage_kernels`).

`layers`: per-layer hidden-state agreement on a real prompt (held-out text crossing the sliding
window and the first HCA entry). With only reference backends, "selected vs reference" would
compare a function with itself, so this stage compares the deployment as served (faithful
numerics: BF16 streams, FP8 activations, fp8_ds_mla cache, FP8 indexer keys — through the
engine's own model object) with the `exact` reference (fp32 streams, fp32 caches, no activation
quantization) on the same loaded weights. A trained QAT checkpoint keeps the two close; a broken
cache reader, a NaN, or a format misread on one path shows up as the first divergent layer.
Thresholds (per layer, all rows of the [T, hc_mult, D] streams): cosine >= LAYER_MIN_COSINE and
max rel <= LAYER_MAX_REL, all finite; logits: mean |Δ log p| <= MAX_MEAN_LOGPROB_DELTA_NATS.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mxserve.model.deepseek_v4 import DeepseekV4Model
from mxserve.model.forward_batch import ForwardBatch
from mxserve.verify.comparators import compare_logits, first_divergent_layer, topk_overlap
from mxserve.verify.observers import FiniteCheckObserver, LayerCapture, NonFiniteValue, TeeObserver
from mxserve.verify.report import StageResult
from mxserve.verify.session import VerifySession
from mxserve.verify.stage_kernels import engine_selection
from mxserve.verify.texts import heldout_prompt

LAYER_MIN_COSINE = 0.995  # measured >= 0.9990 on the default model (CPU, 160 tokens)
LAYER_MAX_REL = 0.25  # measured <= 0.145
MAX_MEAN_LOGPROB_DELTA_NATS = 0.1  # measured 0.030


@dataclass
class _Captured:
    layers: list[torch.Tensor]  # per layer output streams (only the layers reached)
    logits: torch.Tensor | None  # None when the forward raised
    non_finite: list[NonFiniteValue]  # first non-finite sites, in forward order
    error: str | None


def _capture(model: DeepseekV4Model, prompt: list[int], name: str) -> _Captured:
    """One prefill of `prompt` with every layer's output captured and every site finite-checked."""
    capture, finite = LayerCapture(), FiniteCheckObserver()
    previous, model.observer = model.observer, TeeObserver((capture, finite))
    logits, error = None, None
    try:
        state = model.new_cache_state(max_sequences=1, max_positions=len(prompt) + 1, block_size=64,
                                      device=model.embed.device)
        logits = model.forward(ForwardBatch.from_chunks([prompt], [name], [0], device=model.embed.device), state)
    except (ValueError, RuntimeError) as exc:  # e.g. NaN scores refused by the top-k: evidence, not a crash
        error = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
    finally:
        model.observer = previous
    return _Captured(capture.layer_outputs(), logits, finite.findings, error)


def run_layers(session: VerifySession) -> StageResult:
    cfg = session.config
    length = cfg.sliding_window + (160 if session.options.is_full else 32)
    prompt = heldout_prompt(session, length)
    served = session.llm.engine.model
    if session.weights is None:  # the checkpoint stage did not run: load the same way it would
        from mxserve.model.checkpoint import CheckpointReader

        session.weights = CheckpointReader(session.model_dir).load(progress=False)
    exact = DeepseekV4Model(cfg, {n: w.to(served.embed.device) for n, w in session.weights.items()},
                            numerics="exact")
    served_run = _capture(served, prompt, "layers-probe (served)")
    exact_run = _capture(exact, prompt, "layers-probe (exact)")
    failures: list[str] = []
    for label, run in (("served", served_run), ("exact reference", exact_run)):
        if run.non_finite:
            failures.append(f"{label} model, first non-finite value: {run.non_finite[0].describe()}")
        if run.error is not None:
            failures.append(f"{label} model's forward raised {run.error} (after {len(run.layers)} layers completed)")
    if served_run.logits is None or exact_run.logits is None:
        return StageResult.judged("layers", failures, [f"prompt: {len(prompt)} held-out tokens"],
                                  {"non_finite": [f.describe() for f in served_run.non_finite[:5]]})
    served_layers, served_logits, exact_layers, exact_logits = (served_run.layers, served_run.logits,
                                                                exact_run.layers, exact_run.logits)
    div = first_divergent_layer(served_layers, exact_layers, min_cosine=LAYER_MIN_COSINE, max_rel=LAYER_MAX_REL)
    logits = compare_logits(served_logits, exact_logits)
    overlap = topk_overlap(served_logits, exact_logits, 5)
    if div.first_divergent_layer is not None:
        i = div.first_divergent_layer
        failures.append(f"layer {i} diverges from the exact reference: {div.per_layer[i].describe()} "
                        f"(rule: cosine >= {LAYER_MIN_COSINE}, max rel <= {LAYER_MAX_REL}, finite)")
    non_finite_logits = int((~torch.isfinite(served_logits)).sum())
    if non_finite_logits:
        failures.append(f"{non_finite_logits} non-finite logits in the served model's prefill")
    if not logits.mean_abs_logprob_delta_nats <= MAX_MEAN_LOGPROB_DELTA_NATS:
        failures.append(f"logits: mean |Δ log p| {logits.mean_abs_logprob_delta_nats:.3f} nats > "
                        f"{MAX_MEAN_LOGPROB_DELTA_NATS}")
    evidence = [
        f"prompt: {len(prompt)} held-out tokens (sliding window {cfg.sliding_window}); served (faithful, as the "
        "engine runs it) vs exact reference on the same weights",
        "served kernels: " + ", ".join(f"{o}={b}" for o, b in engine_selection(served).items()),
        "per layer cosine: " + ", ".join(f"{c.cosine:.4f}" for c in div.per_layer),
        "per layer max rel: " + ", ".join(f"{c.max_rel:.3f}" for c in div.per_layer),
        f"logits: mean |Δ log p| {logits.mean_abs_logprob_delta_nats:.4f} nats, max "
        f"{logits.max_abs_logprob_delta_nats:.3f}, argmax flips {logits.num_argmax_flips}/{logits.num_positions} "
        f"(first at {logits.first_flip_position}, margin {logits.first_flip_reference_margin_nats}), "
        f"top-5 overlap {overlap:.3f}, min cosine {logits.min_cosine:.5f}",
        f"thresholds: layer cosine >= {LAYER_MIN_COSINE}, layer max rel <= {LAYER_MAX_REL}, mean |Δ log p| <= "
        f"{MAX_MEAN_LOGPROB_DELTA_NATS} nats",
    ]
    metrics = {"per_layer_cosine": [c.cosine for c in div.per_layer], "per_layer_max_rel": [c.max_rel for c in div.per_layer],
               "first_divergent_layer": div.first_divergent_layer, "logits": logits.as_row(), "top5_overlap": overlap}
    return StageResult.judged("layers", failures, evidence, metrics)
