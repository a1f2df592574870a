"""The optional observation hook of a model forward (used by `mxserve verify`).

`DeepseekV4Model(..., observer=None)`: when an object implementing `ForwardObserver` is set, the
forward hands it intermediate values at fixed sites (cache reader outputs, attention logits and
probabilities, MoE outputs, each layer's hidden streams) so verification tools can check them
for finiteness or capture them per layer. With `observer=None` (the default) the forward does
nothing extra beyond one `is None` test per site, and its results are bit-identical either way:
observers must not modify the tensors they are given.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Protocol

import torch

from mxserve.model.forward_batch import ForwardBatch


class ForwardObserver(Protocol):
    def on_attention_values(self, layer_id: int, seq_id: Hashable, site: str, values: torch.Tensor) -> None:
        """Inside one layer's attention for one sequence chunk. site: "window cache reader",
        "compressed cache reader", "indexer key cache reader", "attention logits" (valid keys
        only), "attention probs"."""
        ...

    def on_moe_output(self, layer_id: int, batch: ForwardBatch, out: torch.Tensor) -> None:
        """The MoE block's output [T, D] for every token of the batch."""
        ...

    def on_layer_output(self, layer_id: int, batch: ForwardBatch, streams: torch.Tensor) -> None:
        """The hyper-connection streams [T, hc_mult, D] after layer `layer_id`."""
        ...
