"""One attention block for a pure-decode batch (`DecodeBatch`): static shapes, no host syncs.

The same math, in the same order per row, as `attention.attention_heads` on chunks of one token
(which is what makes the two bit-identical; tests/model/test_decode_path.py checks it):
projections → window-KV insert → compressor step (state row, and the entry this token
completes, if any) → CSA: indexer compressor, scores, tie-broken top-k / HCA: every visible
entry → sparse attention over window ∪ compressed slots → inverse RoPE.

What differs is only how the per-row sets are shaped. The per-chunk path sizes them by the data
(`int(visible.max())` entries, top-k of min(k, visible)) and maps slots with one sequence's
Python table; here every row maps its own slots from the padded device tables
(`decode_batch.paged_slots`) and the candidate sets have the capacity's width
(`DecodeGeometry.hca_candidates` / `indexer_candidates`, top-k always `index_topk` wide), the
columns past a row's visible count holding slot −1. A −1 column is a key that does not exist
for every kernel (sparse attention masks it — a Triton chunk with no valid key leaves the
partial it merges unchanged; top-k never selects past `num_valid`; indexer keys of
−1 score 0 and are masked), so the widening changes no bit of a real row.
"""

from __future__ import annotations

import torch

from mxserve.config import AttentionKind
from mxserve.model.attention import AttentionWeights, LayerContext, main_compressor_step, project_inputs
from mxserve.model.compressor import CompressorSpec, compressor_step
from mxserve.model.decode_batch import DecodeBatch, DecodeGeometry, paged_slots
from mxserve.model.kv_state import LayerCaches, Pool


def decode_attention_heads(
    x: torch.Tensor, batch: DecodeBatch, w: AttentionWeights, ctx: LayerContext, caches: LayerCaches,
    geometry: DecodeGeometry,
) -> torch.Tensor:
    """x [B, D] (normed block input, one token per row) → per-head outputs [B, H, d] (stream dtype)."""
    cfg, policy, kernels = ctx.config, ctx.policy, ctx.kernels
    positions, bs = batch.positions, geometry.block_size

    def slots_of(pool: Pool, indices: torch.Tensor) -> torch.Tensor:
        return paged_slots(batch.block_tables[pool], indices, bs)

    q, kv, indexer_q, indexer_w = project_inputs(x, positions, w, ctx)
    kernels.kv_insert(kv, w.kv_norm, cfg.rms_norm_eps, positions, ctx.inv_freq, caches.window,
                      slots_of(Pool.WINDOW, positions))
    window = torch.arange(-cfg.sliding_window + 1, 1, device=positions.device)
    sources = [(caches.window, slots_of(Pool.WINDOW, positions[:, None] + window[None, :]))]  # [B, W]

    if ctx.kind is not AttentionKind.SLIDING:
        csa, ratio, entry_pool = main_compressor_step(x, positions, w, ctx, caches, slots_of)
        visible = torch.div(positions + 1, ratio, rounding_mode="floor")  # [B]: entries s < visible[b]
        if csa:
            entry_ids = _decode_indexer_select(x, positions, indexer_q, indexer_w, visible, w, ctx, caches,
                                               geometry, slots_of)
        else:
            candidates = torch.arange(geometry.hca_candidates, device=positions.device)
            entry_ids = torch.where(candidates[None, :] < visible[:, None], candidates[None, :], -1)
        sources.append((caches.compressed, slots_of(entry_pool, entry_ids)))

    out = kernels.sparse_attention(q, sources, w.sink, cfg.head_dim**-0.5)
    return kernels.rope(out.to(policy.stream_dtype), positions, ctx.inv_freq, inverse=True)


def _decode_indexer_select(
    x: torch.Tensor, positions: torch.Tensor, indexer_q: torch.Tensor, indexer_w: torch.Tensor,
    visible: torch.Tensor, w: AttentionWeights, ctx: LayerContext, caches: LayerCaches, geometry: DecodeGeometry,
    slots_of,
) -> torch.Tensor:
    """The indexer's compressor, then scores over the capacity's candidates (key slot −1 past each
    row's visible count: such a key reads as zeros, never as another sequence's or stale bytes),
    then the tie-broken top-k among the first visible[b] → entry ids [B, index_topk], −1 padded."""
    cfg, policy, kernels = ctx.config, ctx.policy, ctx.kernels
    compressor_step(
        x, positions, w.indexer.compressor, CompressorSpec(cfg.compress_rate_csa, overlap=True, dim=cfg.index_head_dim),
        state_cache=caches.indexer_state, state_slots_of=lambda p: slots_of(Pool.INDEXER_STATE, p),
        entry_cache=caches.indexer, entry_slots_of=lambda s: slots_of(Pool.INDEXER, s),
        inv_freq=ctx.inv_freq, rms_eps=cfg.rms_norm_eps, out_dtype=policy.stream_dtype,
        round_pooled_to_bf16=policy.round_compressed_to_bf16, kernels=kernels,
    )
    num_rows, num_candidates = positions.shape[0], geometry.indexer_candidates
    ids = torch.arange(num_candidates, device=positions.device).expand(num_rows, num_candidates)
    key_slots = torch.where(ids < visible[:, None], slots_of(Pool.INDEXER, ids), -1)  # [B, N]
    if kernels.indexer_scores_cache is None:
        # The op's contract is one key set for all its queries: one call per row (the reference
        # path; its fp64 scores of a row do not depend on the other rows).
        keys = caches.indexer.read(key_slots.reshape(-1)).view(num_rows, num_candidates, -1)
        scores = torch.cat([kernels.indexer_scores(indexer_q[b : b + 1], indexer_w[b : b + 1], keys[b])
                            for b in range(num_rows)])
    else:
        scores = kernels.indexer_scores_cache(indexer_q, indexer_w, caches.indexer, key_slots)  # per-row slots
    return kernels.topk(scores, cfg.index_topk, num_valid=visible)
