"""mxserve: DeepSeek-V4 inference in its release formats, on hardware without native FP4/FP8.

The package tree is the architecture (docs/architecture.md): config → formats → kernels → model
→ engine → testing → server / verify → cli, each importing only from the layers below it.

`from mxserve import LLM, SamplingParams` is the offline API; those names load lazily so that
`import mxserve` (and the CLI's start) does not pay for torch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__version__ = "0.1.0"

_LAZY = {"LLM": "mxserve.engine.llm", "SamplingParams": "mxserve.engine.sampling_params"}


def default_model_path() -> Path:
    """Directory of the small trained DeepSeek-V4 checkpoint shipped inside the package."""
    return Path(__file__).resolve().parent / "default_model"


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'mxserve' has no attribute {name!r}")


__all__ = ["LLM", "SamplingParams", "__version__", "default_model_path"]
