"""Torch twins of the fused attention-side ops (the spec the Triton kernels in
`mxserve.kernels.attention_ops` must match): each is the model's own unfused math, composed.

They live in the model layer because RoPE and the norms are model math (`rope.py`, `norms.py`)
and the kernels layer may not import the model. `KernelSet()` uses exactly these, so the
default model computes what it computed before the fused slots existed, bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from mxserve.kernels.compressor import compress_pool_ref
from mxserve.model.norms import rms_norm, unweighted_rms_norm
from mxserve.model.rope import apply_rope


def q_norm_rope_ref(q: torch.Tensor, positions: torch.Tensor, inv_freq: torch.Tensor, eps: float) -> torch.Tensor:
    """Per-head unweighted RMS, then RoPE at the token's position: q [T, H, d] → same dtype."""
    return apply_rope(unweighted_rms_norm(q, eps), positions, inv_freq)


def rope_ref(x: torch.Tensor, positions: torch.Tensor, inv_freq: torch.Tensor, *, inverse: bool = False,
             out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """RoPE (or its inverse) on the last 2*len(inv_freq) channels; see `apply_rope`. `out_dtype`: x is
    rounded to it first (the attention output's cast to the stream dtype; one launch with Triton)."""
    return apply_rope(x if out_dtype is None else x.to(out_dtype), positions, inv_freq, inverse=inverse)


def kv_insert_ref(kv: torch.Tensor, weight: torch.Tensor, eps: float, positions: torch.Tensor,
                  inv_freq: torch.Tensor, cache, slots: torch.Tensor) -> None:
    """Window KV (spec §3.4.2): rms_norm(kv; weight) → RoPE → cache.write(slots) (−1 skipped)."""
    cache.write(slots, apply_rope(rms_norm(kv, weight, eps), positions, inv_freq))


def compressor_state_write_ref(state_cache, slots: torch.Tensor, a: torch.Tensor, z: torch.Tensor,
                               ape: torch.Tensor, positions: torch.Tensor, ratio: int) -> None:
    """Compressor state rows (spec §3.4.3): [a_t | z_t + ape[p_t mod m]] in fp32 → state_cache at
    slots[t] (−1 skipped). a, z fp32 [T, c·d]; ape [m, c·d] (the release's fp32 position bias)."""
    state_cache.write(slots, torch.cat((a, z + ape.float()[positions.remainder(ratio)]), dim=-1))


def compressor_emit_ref(
    state_cache, row_slots: torch.Tensor, entry_slots: torch.Tensor, entry_positions: torch.Tensor, *,
    ratio: int, overlap: bool, norm_weight: torch.Tensor, eps: float, inv_freq: torch.Tensor,
    out_dtype: torch.dtype, round_pooled_to_bf16: bool, entry_cache,
    compress_pool: Callable = compress_pool_ref,
) -> None:
    """Emit the entries completed in this step (spec §3.4.3).

    row_slots [T, R] (state-cache slots of each token's receptive field, −1 absent: reads as
    value 0 / logit −inf), entry_slots [T] (−1 where the token completes no entry),
    entry_positions [T] (m·s, the window's first position: the RoPE position).
    """
    emit = (entry_slots >= 0).nonzero().squeeze(1)
    if emit.numel() == 0:
        return
    m, width = ratio, state_cache.row_width // 2
    d = width // 2 if overlap else width
    slots = row_slots[emit]
    rows = state_cache.read(slots.reshape(-1)).view(*slots.shape, 2 * width)
    values, logits = rows[..., :width], rows[..., width:]
    if overlap:  # previous window's A halves, current window's B halves
        values = torch.cat((values[:, :m, :d], values[:, m:, d:]), dim=1)
        logits = torch.cat((logits[:, :m, :d], logits[:, m:, d:]), dim=1)
    pooled = compress_pool(values, logits)  # fp32 [E, d]
    if round_pooled_to_bf16:
        pooled = pooled.to(torch.bfloat16)
    entries = rms_norm(pooled.to(out_dtype), norm_weight, eps)
    entries = apply_rope(entries, entry_positions[emit], inv_freq)
    entry_cache.write(entry_slots[emit], entries)
