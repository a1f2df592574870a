"""Observers for the model's optional forward hook (`mxserve.model.observer.ForwardObserver`).

* `FiniteCheckObserver` — the in-graph validation switch (`mxserve verify --validate`): checks
  that cache reader outputs, attention logits (valid keys) and probabilities, MoE outputs and
  layer outputs are finite, and records each violation naming the layer, the site and the
  request(s). It never raises inside the forward (the run continues so the report can show
  what the model did next); the `generate` stage reads its findings.
* `LayerCapture` — keeps every layer's output streams of one forward, for per-layer comparison.
Off by default: the model only calls these when one is installed (`model.observer = ...`).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field

import torch

from mxserve.model.forward_batch import ForwardBatch


@dataclass(frozen=True)
class NonFiniteValue:
    layer_id: int
    site: str  # e.g. "window cache reader", "attention probs", "MoE output"
    requests: tuple[str, ...]  # request ids (sequence keys) whose rows hold the bad values
    num_bad: int
    num_values: int

    def describe(self) -> str:
        return (f"layer {self.layer_id} {self.site}: {self.num_bad} non-finite of {self.num_values} values "
                f"(request {', '.join(self.requests)})")


@dataclass
class FiniteCheckObserver:
    max_recorded: int = 32  # keep the first violations only (a NaN spreads to every later site)
    findings: list[NonFiniteValue] = field(default_factory=list)
    num_checks: int = 0

    def on_attention_values(self, layer_id: int, seq_id: Hashable, site: str, values: torch.Tensor) -> None:
        self._check(layer_id, site, values, lambda _rows: (str(seq_id),))

    def on_moe_output(self, layer_id: int, batch: ForwardBatch, out: torch.Tensor) -> None:
        self._check(layer_id, "MoE output", out, lambda rows: _requests_of_rows(batch, rows))

    def on_layer_output(self, layer_id: int, batch: ForwardBatch, streams: torch.Tensor) -> None:
        self._check(layer_id, "layer output streams", streams, lambda rows: _requests_of_rows(batch, rows))

    def _check(self, layer_id: int, site: str, values: torch.Tensor, requests_of) -> None:
        self.num_checks += 1
        finite = torch.isfinite(values)
        if bool(finite.all()) or len(self.findings) >= self.max_recorded:
            return
        bad_rows = (~finite).reshape(values.shape[0], -1).any(-1).nonzero().flatten().tolist() if values.dim() else []
        self.findings.append(NonFiniteValue(layer_id, site, requests_of(bad_rows), int((~finite).sum()),
                                            values.numel()))


def _requests_of_rows(batch: ForwardBatch, rows: list[int]) -> tuple[str, ...]:
    names = []
    for chunk in batch.chunks:
        if any(chunk.token_offset <= r < chunk.token_offset + chunk.num_tokens for r in rows):
            names.append(str(chunk.seq_id))
    return tuple(names)


@dataclass
class LayerCapture:
    """Every layer's output streams [T, hc_mult, D] (fp32 copies) of the forwards it observes."""

    outputs: dict[int, list[torch.Tensor]] = field(default_factory=dict)

    def on_attention_values(self, layer_id: int, seq_id: Hashable, site: str, values: torch.Tensor) -> None:
        return None

    def on_moe_output(self, layer_id: int, batch: ForwardBatch, out: torch.Tensor) -> None:
        return None

    def on_layer_output(self, layer_id: int, batch: ForwardBatch, streams: torch.Tensor) -> None:
        self.outputs.setdefault(layer_id, []).append(streams.detach().float().clone())

    def layer_outputs(self) -> list[torch.Tensor]:
        """Per layer, all captured rows concatenated in forward order."""
        return [torch.cat(self.outputs[i]) for i in sorted(self.outputs)]


@dataclass
class TeeObserver:
    """Hands every observation to each of `observers` in turn."""

    observers: tuple

    def on_attention_values(self, layer_id: int, seq_id: Hashable, site: str, values: torch.Tensor) -> None:
        for o in self.observers:
            o.on_attention_values(layer_id, seq_id, site, values)

    def on_moe_output(self, layer_id: int, batch: ForwardBatch, out: torch.Tensor) -> None:
        for o in self.observers:
            o.on_moe_output(layer_id, batch, out)

    def on_layer_output(self, layer_id: int, batch: ForwardBatch, streams: torch.Tensor) -> None:
        for o in self.observers:
            o.on_layer_output(layer_id, batch, streams)
