"""One attention block for a pure-decode batch (`DecodeBatch`): static shapes, no host syncs.

The same math, in the same order per row, as `attention.attention_heads` on chunks of one token
(which is what makes the two bit-identical; tests/model/test_decode_path.py checks it):
projections → window-KV insert → compressor step (state row, and the entry this token
completes, if any) → CSA: indexer compressor, scores, tie-broken top-k / HCA: every visible
entry → sparse attention over window ∪ compressed slots → inverse RoPE.

With `branches` the window KV + compressor and the CSA indexer run on side lanes beside the q
path (`decode_branches` says why that changes no bit). What differs otherwise is only how the
per-row sets are shaped. The per-chunk path sizes them by the data
(`int(visible.max())` entries, top-k of min(k, visible)) and maps slots with one sequence's
Python table; here every row maps its own slots from the padded device tables
(`decode_batch.paged_slots`) and the candidate sets have the capacity's width
(`DecodeGeometry.hca_candidates` / `indexer_candidates`, top-k always `index_topk` wide), the
columns past a row's visible count holding slot −1. A −1 column is a key that does not exist
for every kernel (sparse attention masks it — a Triton chunk with no valid key leaves the
partial it merges unchanged; top-k never selects past `num_valid`; indexer keys of
−1 score 0 and are masked), so the widening changes no bit of a real row. The maps themselves
come from the step's `DecodeAddresses`, computed once and shared by every layer.
"""

from __future__ import annotations

import torch

from mxserve.config import AttentionKind
from mxserve.kernels import side_streams
from mxserve.model.attention import (
    AttentionWeights,
    LayerContext,
    indexer_compressor_site,
    main_compressor_site,
    project_indexer_q,
    project_indexer_weights,
    project_kv,
    project_q,
    project_q_lora,
    run_compressor,
)
from mxserve.model.decode_addresses import DecodeAddresses
from mxserve.model.decode_branches import INDEXER, KV
from mxserve.model.kv_state import LayerCaches, Pool


def decode_attention_heads(
    x: torch.Tensor, addresses: DecodeAddresses, w: AttentionWeights, ctx: LayerContext, caches: LayerCaches, *,
    branches: bool = False,
) -> torch.Tensor:
    """x [B, D] (normed block input, one token per row) → per-head outputs [B, H, d] (stream dtype).
    `addresses`: the step's slot maps, shared with every other layer of the step. `branches`: the
    window KV + compressor and the CSA indexer run on side lanes beside the q path
    (`decode_branches`; the maps must have been primed), else in the same order on one stream."""
    cfg, policy, kernels = ctx.config, ctx.policy, ctx.kernels
    positions, device = addresses.positions, x.device
    site = main_compressor_site(ctx) if ctx.kind is not AttentionKind.SLIDING else None

    with side_streams.fork(device, KV, keep=(x,), on=branches):
        kv = project_kv(x, w, ctx)
        kernels.kv_insert(kv, w.kv_norm, cfg.rms_norm_eps, positions, ctx.inv_freq, caches.window,
                          addresses.window_write())
        if site is not None:
            run_compressor(x, positions, w.compressor, site, addresses.compressor(site), ctx, caches.state,
                           caches.compressed)
    indexer_w = None
    if ctx.kind is AttentionKind.CSA:  # what the indexer needs of x alone: its keys and its head weights
        with side_streams.fork(device, INDEXER, keep=(x,), on=branches):
            _decode_indexer_keys(x, w, ctx, caches, addresses)
            indexer_w = project_indexer_weights(x, w, ctx)
    qr = project_q_lora(x, w, ctx)
    entry_slots = None
    if ctx.kind is AttentionKind.CSA:  # then, on the same lane, what needs the normed q_lora
        with side_streams.fork(device, INDEXER, keep=(qr,), on=branches):
            indexer_q = project_indexer_q(qr, positions, w, ctx)
            entry_ids = _decode_indexer_select(indexer_q, indexer_w, ctx, caches, addresses)
            entry_slots = addresses.slots(site.entry_pool, entry_ids)
    elif site is not None:
        _, entry_slots = addresses.candidates(site.entry_pool, site.spec.ratio, addresses.geometry.hca_candidates)
    q = project_q(qr, positions, w, ctx)
    side_streams.join(device, KV)
    side_streams.join(device, INDEXER)

    sources = [(caches.window, addresses.window_read())]  # [B, W]
    if entry_slots is not None:
        sources.append((caches.compressed, entry_slots))
    out = kernels.sparse_attention(q, sources, w.sink, cfg.head_dim**-0.5)
    return kernels.rope(out, positions, ctx.inv_freq, inverse=True, out_dtype=policy.stream_dtype)


def _decode_indexer_keys(x: torch.Tensor, w: AttentionWeights, ctx: LayerContext, caches: LayerCaches,
                         addresses: DecodeAddresses) -> None:
    """The indexer's compressor step: its state row, and the key this token completes, if any."""
    site = indexer_compressor_site(ctx.config)
    run_compressor(x, addresses.positions, w.indexer.compressor, site, addresses.compressor(site), ctx,
                   caches.indexer_state, caches.indexer)


def _decode_indexer_select(
    indexer_q: torch.Tensor, indexer_w: torch.Tensor, ctx: LayerContext, caches: LayerCaches,
    addresses: DecodeAddresses,
) -> torch.Tensor:
    """Scores over the capacity's candidates (key slot −1 past each row's visible count: such a key
    reads as zeros, never as another sequence's or stale bytes), then the tie-broken top-k among
    the first visible[b] → entry ids [B, index_topk], −1 padded."""
    cfg, kernels = ctx.config, ctx.kernels
    site = indexer_compressor_site(cfg)
    num_candidates = addresses.geometry.indexer_candidates
    _, key_slots = addresses.candidates(Pool.INDEXER, site.spec.ratio, num_candidates)  # [B, N]
    visible = addresses.visible(site.spec.ratio)
    if kernels.indexer_scores_cache is None:
        # The op's contract is one key set for all its queries: one call per row (the reference
        # path; its fp64 scores of a row do not depend on the other rows).
        num_rows = key_slots.shape[0]
        keys = caches.indexer.read(key_slots.reshape(-1)).view(num_rows, num_candidates, -1)
        scores = torch.cat([kernels.indexer_scores(indexer_q[b : b + 1], indexer_w[b : b + 1], keys[b])
                            for b in range(num_rows)])
    else:
        scores = kernels.indexer_scores_cache(indexer_q, indexer_w, caches.indexer, key_slots)  # per-row slots
    return kernels.topk(scores, cfg.index_topk, num_valid=visible)
