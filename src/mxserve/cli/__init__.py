"""mxserve.cli (see docs/architecture.md)."""
