"""RMS normalisations (spec §2): the torch twins live in `mxserve.kernels.rms_norm` (one copy of
the math, next to their Triton kernel); re-exported here for the model's imports."""

from mxserve.kernels.rms_norm.reference import rms_norm, unweighted_rms_norm

__all__ = ["rms_norm", "unweighted_rms_norm"]
