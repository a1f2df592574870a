"""The frozen target's side of draft training: hc-mean hiddens and greedy tokens of data windows.

We run mxserve's OWN model (the engine's `DeepseekV4Model`, its kernels and numerics) through
`forward_with_aux`, the exact call the speculative runner makes at inference, over whole windows
as prefills. So the context features the draft trains on are the ones it will see (same
dequantization, same QAT points, same bf16 stream rounding); a differentiable re-implementation
of the target would only add a second source of truth to keep in sync. The target is frozen, so
no gradient has to flow through it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import torch

from mxserve.model.deepseek_v4 import DeepseekV4Model
from mxserve.model.forward_batch import ForwardBatch


@torch.no_grad()
def target_features(model: DeepseekV4Model, windows: torch.Tensor, layer_ids: Sequence[int], *,
                    batch_windows: int = 8, deadline: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """windows [N, T] int64 (each a fresh sequence from position 0) → (aux [n, T, L·D] in the
    stream dtype, greedy [n, T] int64: the target's argmax next token at every row), for the first
    n ≤ N windows done before `deadline` (time.monotonic(); at least one batch always runs)."""
    num, length = windows.shape
    device = model.embed.device
    auxs, greedy = [], []
    for start in range(0, num, batch_windows):
        if deadline is not None and auxs and time.monotonic() > deadline:
            break
        rows = windows[start:start + batch_windows]
        state = model.new_cache_state(max_sequences=rows.shape[0], max_positions=length, device=device)
        batch = ForwardBatch.from_chunks(rows.tolist(), list(range(rows.shape[0])), [0] * rows.shape[0], device=device)
        logits, aux = model.forward_with_aux(batch, state, tuple(layer_ids))
        auxs.append(aux.view(rows.shape[0], length, -1))
        greedy.append(logits.argmax(-1).view(rows.shape[0], length))
        del state
    return torch.cat(auxs), torch.cat(greedy)
