"""mxserve.engine (see docs/architecture.md)."""
