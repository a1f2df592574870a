"""mxserve.kernels (see docs/architecture.md)."""
