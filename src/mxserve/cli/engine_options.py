"""Engine options that `mxserve run` and `mxserve serve` share, declared once (the flag, its help)."""

from __future__ import annotations

from typing import Annotated

import typer

SpeculativeConfigOption = Annotated[str | None, typer.Option(
    "--speculative-config", help='DSpark speculative decoding as JSON, e.g. \'{"method": "dspark", '
    '"num_speculative_tokens": 7}\' (keys: draft_sample_method, rejection_sample_method); docs/speculative.md.')]

KernelOverridesOption = Annotated[str | None, typer.Option(
    "--kernel-overrides", help="Kernel backends per op, e.g. 'linear=triton,moe=triton' (ops: linear, moe, "
    "attention, hc), or 'all-triton'. Default: the torch reference kernels, which on a GPU sync with the host, so "
    "decode runs without CUDA graphs; all-triton is the fast set. Same syntax as MXSERVE_KERNEL_OVERRIDES.")]
