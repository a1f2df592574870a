"""One rank's kernel choices: the single-process chooser code run over the rank's own shards.

The driver resolves `kernel_overrides` / `MXSERVE_KERNEL_OVERRIDES` once and sends the result in
the `WorkerSpec`, so every rank (spawned or torchrun) applies the same overrides; each rank then
chooses per layer over ITS slices (`choose_linear_per_layer`, `with_moe_and_attention` from
`mxserve.model.kernel_selection`, as `LLMEngine` does in one process). A shard a Triton candidate
cannot implement (e.g. a wo_a group shard that is not whole 128-row blocks, experts not on
128-multiples) gets the reference with the candidate's reason, never silently.

A spawned rank has no log handlers, so the choices' INFO lines are captured here and travel back
in the rank's report; the driver logs rank 0's and any other rank's that differ.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Iterator, Mapping

import torch

from mxserve.distributed.plan import ShardingPlan
from mxserve.kernels.chooser import Platform
from mxserve.kernels.linear import Weight
from mxserve.model.deepseek_v4 import DeepseekV4Model
from mxserve.model.kernel_selection import (
    choose_linear_per_layer,
    linear_dispatch_set,
    with_moe_and_attention,
)
from mxserve.model.kernel_set import REFERENCE_KERNELS, KernelSet

_CHOICE_LOGGERS = ("mxserve.engine", "mxserve.kernels")  # where the chooser code logs its choices


def uses_resident_weights(overrides: Mapping[str, str]) -> bool:
    """Whether decoded resident linears are allowed: not when linear is forced (as in one process,
    where any forced linear backend runs on the packed weights)."""
    return "linear" not in overrides


def rank_linear_kernels(weights: Mapping[str, Weight], plan: ShardingPlan, rank: int, device: torch.device, *,
                        numerics: str, overrides: Mapping[str, str]) -> KernelSet:
    """The rank's linear slots: per layer over its shards when linear=triton is forced, else the
    reference. Routed experts another rank owns (EP placeholders, never called) are not chosen."""
    forced = overrides.get("linear")
    if forced != "triton":
        return REFERENCE_KERNELS
    owned = {name: w for name, w in weights.items() if plan.shard(name, rank) is not None}
    choices = choose_linear_per_layer(owned, Platform.probe(device), o_groups=plan.rank_config().o_groups,
                                      faithful=numerics == "faithful", forced=forced)
    logging.getLogger("mxserve.engine").info(
        "linear backend: triton (forced; per-layer choices above over this rank's shards; layers Triton cannot "
        "implement run the reference)")
    return linear_dispatch_set(owned, choices)


def own_experts_only(model: DeepseekV4Model, plan: ShardingPlan, rank: int) -> None:
    """With EP, bind each layer's MoE to the rank's own experts (one persistent tuple per layer):
    the MoE chooser then reads the experts this rank multiplies, and the Triton experts' stacked
    copy (cached by the tuple's identity) is built once, not per step."""
    if not plan.expert_parallel:
        return
    first, last = plan.expert_range(rank)
    model.layers = [(*layer[:5], dataclasses.replace(layer[5], experts=tuple(layer[5].experts[first:last])),
                     *layer[6:]) for layer in model.layers]


def choose_moe_and_attention(model: DeepseekV4Model, device: torch.device, *, overrides: Mapping[str, str],
                             max_model_len: int) -> None:
    """Fold the MoE and attention choices (per layer over the rank's experts) into the model."""
    model.set_kernels(with_moe_and_attention(model, model.kernels, device=device, overrides=overrides,
                                             max_model_len=max_model_len))


@contextlib.contextmanager
def captured_choice_log() -> Iterator[list[str]]:
    """Collect the chooser loggers' INFO lines (a spawned rank has no handlers to print them)."""
    lines: list[str] = []

    class _Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    handler = _Collect(logging.INFO)
    saved = []
    for name in _CHOICE_LOGGERS:
        log = logging.getLogger(name)
        saved.append((log, log.level, log.propagate))
        log.addHandler(handler)
        log.propagate = False  # in-process rank 0 (torchrun): the driver logs the lines once, from the report
        if log.getEffectiveLevel() > logging.INFO:
            log.setLevel(logging.INFO)
    try:
        yield lines
    finally:
        for log, level, propagate in saved:
            log.removeHandler(handler)
            log.setLevel(level)
            log.propagate = propagate


__all__ = ["captured_choice_log", "choose_moe_and_attention", "own_experts_only", "rank_linear_kernels",
           "uses_resident_weights"]
