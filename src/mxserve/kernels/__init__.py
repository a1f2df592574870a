"""mxserve.kernels (see docs/architecture.md): one folder per op, each with a torch reference
and (where written) a Triton backend, selected per call with `backend=` or per layer by
`mxserve.kernels.chooser`."""

from mxserve.kernels.grouped_linear import grouped_linear
from mxserve.kernels.linear_bf16 import linear_bf16
from mxserve.kernels.linear_fp8_block import linear_fp8_block
from mxserve.kernels.linear_int8 import linear_int8

__all__ = ["grouped_linear", "linear_bf16", "linear_fp8_block", "linear_int8"]
