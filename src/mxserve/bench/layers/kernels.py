"""The bench model, built with the kernels the engine would run: the engine's own function.

The benchmark must time what serving runs, so it builds its model through
`mxserve.model.kernel_selection.build_engine_model`, the function `LLMEngine` builds its model
with: linear per layer (forced Triton) or the reference (resident on small CPU models), then the
MoE and attention choosers. The overrides are the engine's: `--kernels` plays
`EngineConfig.kernel_overrides` (same `op=backend,...` syntax and backends as
`MXSERVE_KERNEL_OVERRIDES`, and like the config it wins over that variable op by op). Nothing
here picks a faster backend on its own: a benchmark that ran kernels the server does not run
would be evidence for nothing. The chooser's log lines (every choice with its reason) are
captured and go into the report beside the per-op labels.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import torch

from mxserve.config import ModelConfig
from mxserve.config.engine_config import KERNEL_BACKENDS
from mxserve.distributed.rank_kernels import captured_choice_log
from mxserve.kernels.chooser import OVERRIDES_ENV, parse_overrides_env
from mxserve.model.deepseek_v4 import DeepseekV4Model
from mxserve.model.kernel_selection import build_engine_model, resolve_overrides
from mxserve.model.kernel_set import KernelSet


@dataclasses.dataclass(frozen=True)
class EngineKernels:
    """What the engine would run the bench model with, and where each choice came from."""

    overrides: dict[str, str]  # resolved: --kernels over MXSERVE_KERNEL_OVERRIDES, op → backend
    source: str  # where the overrides came from, in words
    linear_backend: str  # the engine's linear decision ("triton", "reference", "reference-resident")
    reasons: tuple[str, ...]  # the choosers' log lines, each choice with its reason


def parse_kernels_option(text: str | None, environ: Mapping[str, str] | None = None) -> tuple[dict[str, str], str]:
    """(resolved overrides, their source in words) for `--kernels` (None: not given).

    `text` has the environment variable's syntax (`linear=triton,moe=triton,attention=triton`);
    ops and backends are checked against `KERNEL_BACKENDS` as `EngineConfig` checks its own.
    Raises ValueError naming the bad item, op or backend and what is known."""
    if text is None:
        overrides = resolve_overrides({}, environ)
        source = f"{OVERRIDES_ENV}" if overrides else f"engine defaults ({OVERRIDES_ENV} unset)"
        return overrides, source
    try:
        given = parse_overrides_env({OVERRIDES_ENV: text})  # the variable's syntax, parsed by its own parser
    except ValueError:
        raise ValueError(f"--kernels {text!r}: expected op=backend[,op=backend...], e.g. "
                         "linear=triton,moe=triton,attention=triton") from None
    if not given:
        raise ValueError(f"--kernels {text!r}: no op=backend given")
    for op, backend in given.items():
        if op not in KERNEL_BACKENDS:
            raise ValueError(f"--kernels: unknown op {op!r}; known ops: {sorted(KERNEL_BACKENDS)}")
        if backend not in KERNEL_BACKENDS[op]:
            raise ValueError(f"--kernels: {op}={backend!r}: unknown backend; available for {op}: "
                             f"{list(KERNEL_BACKENDS[op])}")
    overrides = resolve_overrides(given, environ)
    env_only = sorted(set(overrides) - set(given))
    source = "--kernels" + (f", plus {OVERRIDES_ENV} for {env_only}" if env_only else "")
    return overrides, source


def build_bench_model(config: ModelConfig, weights: Mapping[str, object], *, device: torch.device, numerics: str,
                      overrides: dict[str, str], source: str, max_model_len: int
                      ) -> tuple[DeepseekV4Model, EngineKernels]:
    """The model exactly as `LLMEngine` would build it for these weights and overrides."""
    with captured_choice_log() as lines:
        model, linear_backend = build_engine_model(config, weights, device=device, numerics=numerics,
                                                   kv_cache_dtype=None, overrides=overrides,
                                                   max_model_len=max_model_len)
    return model, EngineKernels(dict(overrides), source, linear_backend, tuple(lines))


def kernel_labels(kernels: KernelSet) -> dict[str, str]:
    return {f.name: kernels.label(f.name) for f in dataclasses.fields(kernels) if f.name != "labels"}
