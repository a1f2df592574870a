"""mxserve.formats (see docs/architecture.md)."""
