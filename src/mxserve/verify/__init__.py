"""mxserve.verify (see docs/architecture.md)."""
