"""Manifold-constrained hyper-connections (spec §3.3, §3.6): `hc_pre`, `hc_post`, `hc_head`.

Backends: "reference" (`reference.py`, the torch twins: the spec) and "triton" (`triton.py`:
3 launches per hc_pre / hc_head, 1 per hc_post, the twins' bits in practice). Which one the
model runs is decided once at load by `chooser.choose_hc` (override op "hc"); `hc_ops(backend)`
gives the KernelSet slot callables. Triton is imported only when the Triton backend is used.
"""

from __future__ import annotations

from mxserve.kernels.hyper_connection.chooser import (
    HC_BACKENDS,
    HyperConnectionSpec,
    TritonHyperConnection,
    choose_hc,
    hc_ops,
)
from mxserve.kernels.hyper_connection.reference import (
    HyperConnectionWeights,
    hc_head_ref,
    hc_post_ref,
    hc_pre_ref,
)

__all__ = ["HC_BACKENDS", "HyperConnectionSpec", "HyperConnectionWeights", "TritonHyperConnection", "choose_hc",
           "hc_head_ref", "hc_ops", "hc_post_ref", "hc_pre_ref"]
