"""mxserve.model (see docs/architecture.md)."""
