"""Manifold-constrained hyper-connections (mHC, spec §3.3 and §3.6), as the model names them.

The math (one copy, the spec) lives in `mxserve.kernels.hyper_connection.reference`; this module
re-exports it under the model's names so existing imports keep working. The model itself calls
the ops through its KernelSet (`kernels.hc_pre`, `kernels.hc_post`, `kernels.hc_head`), whose
defaults are these twins; the Triton backend is chosen at load (op "hc").
"""

from __future__ import annotations

from mxserve.kernels.hyper_connection.reference import HyperConnectionWeights
from mxserve.kernels.hyper_connection.reference import hc_head_ref as hc_head
from mxserve.kernels.hyper_connection.reference import hc_post_ref as hc_post
from mxserve.kernels.hyper_connection.reference import hc_pre_ref as hc_pre

__all__ = ["HyperConnectionWeights", "hc_head", "hc_post", "hc_pre"]
