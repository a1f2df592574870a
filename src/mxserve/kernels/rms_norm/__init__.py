"""RMS norms: the torch twins (`rms_norm`, `unweighted_rms_norm`, the spec) and, on CUDA, a
one-launch Triton weighted norm (`mxserve.kernels.rms_norm.triton.rms_norm_triton`), chosen with
the "hc" op."""

from mxserve.kernels.rms_norm.reference import rms_norm, unweighted_rms_norm

__all__ = ["rms_norm", "unweighted_rms_norm"]
