"""mxserve.server (see docs/architecture.md)."""
