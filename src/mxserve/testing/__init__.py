"""mxserve.testing (see docs/architecture.md)."""
