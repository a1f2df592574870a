"""The op implementations the bench model runs with: the ones the engine would run with.

The benchmark must time what serving runs, so it asks the same place the engine asks. Today
`LLMEngine` builds `DeepseekV4Model` with the default `KernelSet` (all references) and only
logs the linear chooser's per-layer decisions; when the engine starts consuming the choosers,
this function must return the set the engine builds (one call), and the report's `kernels`
labels will say so. Nothing here picks a faster backend on its own: a benchmark that ran
kernels the server does not run would be evidence for nothing.
"""

from __future__ import annotations

import dataclasses

from mxserve.model.kernel_set import REFERENCE_KERNELS, KernelSet

ENGINE_NOTE = ("engine default KernelSet (all torch references: the engine builds its model with it and does not "
               "consume the kernel choosers' decisions yet)")


def engine_kernels() -> tuple[KernelSet, str]:
    """(the KernelSet the engine runs the model with, a note saying where it came from)."""
    return REFERENCE_KERNELS, ENGINE_NOTE


def kernel_labels(kernels: KernelSet) -> dict[str, str]:
    return {f.name: kernels.label(f.name) for f in dataclasses.fields(kernels) if f.name != "labels"}
