"""mxserve: DeepSeek-V4 inference in its release formats, on hardware without native FP4/FP8.

The package tree is the architecture (docs/architecture.md): config → formats → kernels → model
→ engine → testing → server / verify → cli, each importing only from the layers below it.
"""

__version__ = "0.1.0"
