"""Named access to a loaded checkpoint's weights, by the release names (spec §6).

The loader hands the model a flat mapping: linears under their prefix (`layers.0.attn.wq_a`)
as a `QuantizedWeight` or a full-precision tensor, every other tensor under its full name
(`layers.0.attn_norm.weight`). `WeightStore` is the one place that resolves a name, so a
missing tensor is a clear KeyError naming it instead of a failure deep in the math.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from mxserve.formats import QuantizedWeight
from mxserve.kernels.linear import ResidentWeight, Weight


class WeightStore:
    """`resident=True` hands out linears decoded once into fp64 (`ResidentWeight`): the same values,
    no per-call decode, 8 bytes per parameter of memory."""

    def __init__(self, weights: Mapping[str, torch.Tensor | QuantizedWeight], *, resident: bool = False) -> None:
        self._weights = dict(weights)
        self._resident = resident

    def __contains__(self, name: str) -> bool:
        return name in self._weights or f"{name}.weight" in self._weights

    def tensor(self, name: str) -> torch.Tensor:
        value = self._weights.get(name)
        if value is None:
            raise KeyError(f"checkpoint has no tensor {name!r}")
        if isinstance(value, QuantizedWeight):
            raise TypeError(f"{name!r} is a quantized linear, not a plain tensor")
        return value

    def linear(self, prefix: str) -> Weight:
        """A linear's weight by prefix (`layers.0.attn.wq_a`), quantized or full precision."""
        for key in (prefix, f"{prefix}.weight"):
            if key in self._weights:
                weight = self._weights[key]
                return ResidentWeight.of(weight) if self._resident else weight
        raise KeyError(f"checkpoint has no linear {prefix!r}")

    def names(self) -> list[str]:
        return sorted(self._weights)
