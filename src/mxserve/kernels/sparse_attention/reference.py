"""Torch reference for DeepSeek-V4 sparse attention with a sink over cache slots (spec §3.4.5).

Each query token t attends, with all H heads, to the union of the entries named by its slot
lists (window slots into the window cache, compressed slots into the compressed cache; −1 =
no entry). K = V = the full 512-dim entry (NoPE + rotated RoPE channels). Softmax in fp32 with
the per-head sink: P_j = exp(ℓ_j − M) / (Σ exp(ℓ_j − M) + exp(sink_h − M)), computed in fp64 and rounded
once to fp32 (batch invariance). Entries are read
through each cache's own `read` (its one address function), so the reference exercises the
real physical layout.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import torch


class SlotReader(Protocol):
    def read(self, slots: torch.Tensor) -> torch.Tensor:  # [N] int64 → [N, d] fp32 (−1 → zeros)
        ...


_QUERY_CHUNK = 64  # bounds the gathered [chunk, K, d] working set


def sparse_attention_ref(
    q: torch.Tensor,
    sources: Sequence[tuple[SlotReader, torch.Tensor]],
    sink: torch.Tensor,
    scale: float,
    inspect: Callable[[str, torch.Tensor], None] | None = None,
) -> torch.Tensor:
    """q [T, H, d]; sources: (cache, slots [T, K_i] int64, −1 invalid); sink [H] → out fp32 [T, H, d].

    `inspect` (optional, for verification): called with ("source i", entries read from source i),
    ("logits", the valid keys' logits) and ("probs", probabilities); it must not modify them."""
    num_tokens = q.shape[0]
    out = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    for start in range(0, num_tokens, _QUERY_CHUNK):
        stop = min(start + _QUERY_CHUNK, num_tokens)
        kvs, masks = [], []
        for source_index, (cache, slots) in enumerate(sources):
            chunk_slots = slots[start:stop]
            if chunk_slots.shape[1] == 0:
                continue
            entries = cache.read(chunk_slots.reshape(-1)).float()
            if inspect is not None:
                inspect(f"source {source_index}", entries)
            kvs.append(entries.view(stop - start, chunk_slots.shape[1], -1))
            masks.append(chunk_slots >= 0)
        if not kvs:
            continue  # no keys at all: the sink takes all mass, output 0
        # fp64 throughout, rounded once: fp32 batched matmuls may change their summation order
        # with the number of queries in the call, which breaks batch invariance (and a BF16
        # rounding downstream turns a 1-ulp difference into a visible one).
        kv = torch.cat(kvs, dim=1).double()  # [t, K, d]
        valid = torch.cat(masks, dim=1)  # [t, K]
        logits = torch.einsum("thd,tkd->thk", q[start:stop].double(), kv) * scale
        logits = logits.masked_fill(~valid[:, None, :], float("-inf"))
        sink_logits = sink.double()[None, :, None].expand(stop - start, -1, 1)
        combined = torch.cat((logits, sink_logits), dim=-1)
        probs = torch.softmax(combined, dim=-1)[..., :-1]
        if inspect is not None:
            inspect("logits", logits.masked_select(valid[:, None, :].expand_as(logits)))
            inspect("probs", probs)
        out[start:stop] = torch.einsum("thk,tkd->thd", probs, kv).float()
    return out
