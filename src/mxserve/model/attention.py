"""One DeepSeek-V4 attention block (spec §3.4) over a varlen batch, against paged caches.

Order inside the layer (spec §11): projections → q per-head RMS + RoPE (`kernels.q_norm_rope`);
kv norm + RoPE + encode → window cache (`kernels.kv_insert`, one call for the whole batch); compressor rows → emitted entries → compressed cache (and the indexer's own
compressor → indexer key cache); indexer scores + tie-broken top-k (CSA); sparse attention
with the sink over window ∪ compressed slots, read back through the caches' address function;
inverse RoPE on the output; grouped wo_a; wo_b.

Projections run over all tokens of the batch at once. Cache writes, compressors and attention run
over all chunks at once too, each row with its own sequence's block tables (`chunk_batch`); the
CSA indexer's scoring and top-k run per chunk, over that sequence's keys. With an observer (or
MXSERVE_PER_CHUNK_ATTENTION=1) everything after the projections runs chunk by chunk instead.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mxserve.config import AttentionKind, ModelConfig
from mxserve.kernels.linear import Weight
from mxserve.model.chunk_batch import ChunkTables, batched_chunks_enabled, candidate_width, chunk_tables
from mxserve.model.compressor import (
    CompressorAddresses,
    CompressorSite,
    CompressorWeights,
    compressor_addresses,
    compressor_step,
    indexer_compressor_site,
    kind_compressor_site,
)
from mxserve.model.forward_batch import ForwardBatch, SequenceChunk
from mxserve.model.kernel_set import REFERENCE_KERNELS, KernelSet
from mxserve.model.kv_state import LayerCaches, ModelCacheState, Pool
from mxserve.model.numerics import NumericPolicy
from mxserve.model.observer import ForwardObserver


@dataclass(frozen=True)
class IndexerWeights:
    wq_b: Weight  # [H_I·D_I, q_lora_rank]
    weights_proj: Weight  # [H_I, D]
    compressor: CompressorWeights


@dataclass(frozen=True)
class AttentionWeights:
    wq_a: Weight
    q_norm: torch.Tensor
    wq_b: Weight
    wkv: Weight
    kv_norm: torch.Tensor
    wo_a: Weight  # [G·R, H·d/G] block-diagonal groups
    wo_b: Weight
    sink: torch.Tensor  # [H] fp32
    compressor: CompressorWeights | None
    indexer: IndexerWeights | None


@dataclass(frozen=True)
class LayerContext:
    config: ModelConfig
    policy: NumericPolicy
    layer_id: int
    kind: AttentionKind
    inv_freq: torch.Tensor  # this layer's RoPE table
    kernels: KernelSet = REFERENCE_KERNELS  # op implementations (mxserve.model.kernel_set)


def attention_forward(
    x: torch.Tensor, batch: ForwardBatch, w: AttentionWeights, ctx: LayerContext,
    caches: LayerCaches, state: ModelCacheState, observer: ForwardObserver | None = None,
) -> torch.Tensor:
    """x [T, D] (normed block input, stream dtype) → [T, D] in stream dtype.

    `observer` (optional, verification only) sees cache reader outputs and attention logits/probs."""
    return output_projection(attention_heads(x, batch, w, ctx, caches, state, observer), w, ctx)


def output_projection(heads: torch.Tensor, w: AttentionWeights, ctx: LayerContext) -> torch.Tensor:
    """Grouped wo_a then wo_b: heads [T, H, d] (stream dtype) → [T, D] stream dtype.

    Tensor parallelism (`mxserve.distributed`) replaces this step with its sharded twin."""
    cfg, policy, kernels = ctx.config, ctx.policy, ctx.kernels
    sd, num_tokens = policy.stream_dtype, heads.shape[0]
    grouped = kernels.grouped_linear(heads.reshape(num_tokens, cfg.o_groups, -1), w.wo_a, out_dtype=sd)
    return kernels.linear(grouped.flatten(1), w.wo_b, quantize_input=policy.quantize_gemm_inputs, out_dtype=sd)


def attention_heads(
    x: torch.Tensor, batch: ForwardBatch, w: AttentionWeights, ctx: LayerContext,
    caches: LayerCaches, state: ModelCacheState, observer: ForwardObserver | None = None,
) -> torch.Tensor:
    """Everything before the output projection: x [T, D] → per-head outputs [T, H, d] in stream
    dtype, after the inverse RoPE (H = ctx.config.num_attention_heads, the heads `w.wq_b` holds)."""
    cfg, kernels = ctx.config, ctx.kernels
    positions = batch.positions
    q, kv, indexer_q, indexer_w = project_inputs(x, positions, w, ctx)

    if observer is None and batch.chunks and batched_chunks_enabled():
        tables = chunk_tables(state, batch)  # once per forward; makes the tables cover every chunk
        kernels.kv_insert(kv, w.kv_norm, cfg.rms_norm_eps, positions, ctx.inv_freq, caches.window,
                          tables.window_write())
        out = _attend_all_chunks(batch, x, q, indexer_q, indexer_w, w, ctx, caches, tables)
    else:
        for chunk in batch.chunks:
            state.ensure_capacity(chunk.seq_id, chunk.end_pos)
        out = _attend_chunk_by_chunk(batch, x, q, kv, indexer_q, indexer_w, w, ctx, caches, state, observer)
    return kernels.rope(out, positions, ctx.inv_freq, inverse=True, out_dtype=ctx.policy.stream_dtype)


def _attend_chunk_by_chunk(
    batch: ForwardBatch, x: torch.Tensor, q: torch.Tensor, kv: torch.Tensor, indexer_q: torch.Tensor | None,
    indexer_w: torch.Tensor | None, w: AttentionWeights, ctx: LayerContext, caches: LayerCaches,
    state: ModelCacheState, observer: ForwardObserver | None,
) -> torch.Tensor:
    """The window KV insert of every token, then each chunk's attention on its own (observers see
    values per sequence): fp32 [T, H, d]."""
    cfg, positions = ctx.config, batch.positions
    window_write_slots = []
    for chunk in batch.chunks:
        rows = slice(chunk.token_offset, chunk.token_offset + chunk.num_tokens)
        window_write_slots.append(state.slots(Pool.WINDOW, chunk.seq_id, positions[rows]))
    ctx.kernels.kv_insert(kv, w.kv_norm, cfg.rms_norm_eps, positions, ctx.inv_freq, caches.window,
                          torch.cat(window_write_slots) if window_write_slots else positions.new_empty(0))
    out = torch.empty(x.shape[0], cfg.num_attention_heads, cfg.head_dim, dtype=torch.float32, device=x.device)
    for chunk in batch.chunks:
        rows = slice(chunk.token_offset, chunk.token_offset + chunk.num_tokens)
        out[rows] = _attend_chunk(
            chunk, positions[rows], x[rows], q[rows],
            None if indexer_q is None else indexer_q[rows], None if indexer_w is None else indexer_w[rows],
            w, ctx, caches, state, observer,
        )
    return out


def project_inputs(
    x: torch.Tensor, positions: torch.Tensor, w: AttentionWeights, ctx: LayerContext,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """The row-wise projections of every token (the per-chunk path; the decode path calls the parts
    below itself, some on side lanes): q [T, H, d] after the per-head RMS + RoPE, kv [T, d] before
    its norm (kv_insert does it), and for CSA layers the indexer's q [T, H_I, D_I] (RoPE'd) and
    head weights [T, H_I] (else None)."""
    qr = project_q_lora(x, w, ctx)
    q = project_q(qr, positions, w, ctx)
    kv = project_kv(x, w, ctx)
    indexer_q, indexer_w = project_indexer(x, qr, positions, w, ctx) if w.indexer is not None else (None, None)
    return q, kv, indexer_q, indexer_w


def project_q_lora(x: torch.Tensor, w: AttentionWeights, ctx: LayerContext) -> torch.Tensor:
    """wq_a, then q_norm: the normed q_lora [T, q_lora_rank] that wq_b and the indexer's wq_b read."""
    cfg, policy, kernels = ctx.config, ctx.policy, ctx.kernels
    q_lora = kernels.linear(x, w.wq_a, quantize_input=policy.quantize_gemm_inputs, out_dtype=policy.stream_dtype)
    return kernels.rms_norm(q_lora, w.q_norm, cfg.rms_norm_eps)


def project_q(qr: torch.Tensor, positions: torch.Tensor, w: AttentionWeights, ctx: LayerContext) -> torch.Tensor:
    """wq_b, then the per-head RMS + RoPE: q [T, H, d]."""
    cfg, policy, kernels = ctx.config, ctx.policy, ctx.kernels
    q = kernels.linear(qr, w.wq_b, quantize_input=policy.quantize_gemm_inputs, out_dtype=policy.stream_dtype)
    q = q.view(qr.shape[0], cfg.num_attention_heads, cfg.head_dim)
    return kernels.q_norm_rope(q, positions, ctx.inv_freq, cfg.rms_norm_eps)


def project_kv(x: torch.Tensor, w: AttentionWeights, ctx: LayerContext) -> torch.Tensor:
    """wkv: kv [T, d] before its norm (kv_norm + RoPE happen in kv_insert)."""
    policy = ctx.policy
    return ctx.kernels.linear(x, w.wkv, quantize_input=policy.quantize_gemm_inputs, out_dtype=policy.stream_dtype)


def project_indexer(x: torch.Tensor, qr: torch.Tensor, positions: torch.Tensor, w: AttentionWeights,
                    ctx: LayerContext) -> tuple[torch.Tensor, torch.Tensor]:
    """A CSA layer's indexer inputs: its q [T, H_I, D_I] (RoPE'd) from the normed q_lora, and its
    head weights [T, H_I] from x."""
    return project_indexer_q(qr, positions, w, ctx), project_indexer_weights(x, w, ctx)


def project_indexer_q(qr: torch.Tensor, positions: torch.Tensor, w: AttentionWeights, ctx: LayerContext
                      ) -> torch.Tensor:
    """The indexer's wq_b on the normed q_lora, then RoPE: [T, H_I, D_I]."""
    cfg, policy, kernels = ctx.config, ctx.policy, ctx.kernels
    indexer_q = kernels.linear(qr, w.indexer.wq_b, quantize_input=policy.quantize_gemm_inputs,
                               out_dtype=policy.stream_dtype).view(qr.shape[0], cfg.index_n_heads, cfg.index_head_dim)
    return kernels.rope(indexer_q, positions, ctx.inv_freq)


def project_indexer_weights(x: torch.Tensor, w: AttentionWeights, ctx: LayerContext) -> torch.Tensor:
    """The indexer's head weights [T, H_I] from x, with the score scale folded in."""
    cfg = ctx.config
    return ctx.kernels.linear(x, w.indexer.weights_proj) * (cfg.index_head_dim**-0.5 * cfg.index_n_heads**-0.5)


def _attend_chunk(
    chunk: SequenceChunk, positions: torch.Tensor, x: torch.Tensor, q: torch.Tensor,
    indexer_q: torch.Tensor | None, indexer_w: torch.Tensor | None,
    w: AttentionWeights, ctx: LayerContext, caches: LayerCaches, state: ModelCacheState,
    observer: ForwardObserver | None,
) -> torch.Tensor:
    cfg, seq = ctx.config, chunk.seq_id
    window = torch.arange(-cfg.sliding_window + 1, 1, device=positions.device)
    window_slots = state.slots(Pool.WINDOW, seq, positions[:, None] + window[None, :])  # [T, W]
    sources = [(caches.window, window_slots)]

    if ctx.kind is not AttentionKind.SLIDING:
        site = main_compressor_site(ctx)
        run_compressor(x, positions, w.compressor, site, _chunk_compressor_addresses(positions, site, state, seq), ctx,
                       caches.state, caches.compressed)
        visible = torch.div(positions + 1, site.spec.ratio, rounding_mode="floor")  # entries s < visible[t]
        if ctx.kind is AttentionKind.CSA:
            entry_ids = _indexer_select(chunk, positions, x, indexer_q, indexer_w, visible, w, ctx, caches, state,
                                        observer)
        else:
            candidates = torch.arange(int(visible.max()), device=positions.device)
            entry_ids = torch.where(candidates[None, :] < visible[:, None], candidates[None, :], -1)
        sources.append((caches.compressed, state.slots(site.entry_pool, seq, entry_ids)))

    inspect = None
    if observer is not None:
        site_names = {"source 0": "window cache reader", "source 1": "compressed cache reader",
                      "logits": "attention logits", "probs": "attention probs"}

        def inspect(name: str, values: torch.Tensor) -> None:
            observer.on_attention_values(ctx.layer_id, seq, site_names[name], values)

    return ctx.kernels.sparse_attention(q, sources, w.sink, cfg.head_dim**-0.5, inspect=inspect)


def _attend_all_chunks(
    batch: ForwardBatch, x: torch.Tensor, q: torch.Tensor, indexer_q: torch.Tensor | None,
    indexer_w: torch.Tensor | None, w: AttentionWeights, ctx: LayerContext, caches: LayerCaches, tables: ChunkTables,
) -> torch.Tensor:
    """`_attend_chunk` for every chunk of the batch at once (`mxserve.model.chunk_batch` says why
    the rows get the per-chunk path's bits): one slot map, one compressor step per compressor and
    one sparse-attention launch; the CSA indexer's scoring and top-k per chunk. Every map but the
    CSA layers' selected entries comes from `tables`, computed once per forward."""
    cfg, positions = ctx.config, batch.positions
    sources = [(caches.window, tables.window_read())]  # [T, W]
    if ctx.kind is not AttentionKind.SLIDING:
        site = main_compressor_site(ctx)
        run_compressor(x, positions, w.compressor, site, tables.compressor(site), ctx, caches.state, caches.compressed)
        if ctx.kind is AttentionKind.CSA:
            visible = tables.visible(site.spec.ratio)  # entries s < visible[t]
            entry_ids = _indexer_select_all(batch, x, indexer_q, indexer_w, visible, w, ctx, caches, tables)
            sources.append((caches.compressed, tables.slots(site.entry_pool, entry_ids)))
        else:  # the widest chunk's candidates; each row's list is its chunk's, then −1 (folded as nothing)
            sources.append((caches.compressed, tables.candidates(site.entry_pool, site.spec.ratio)[1]))
    return ctx.kernels.sparse_attention(q, sources, w.sink, cfg.head_dim**-0.5)


def _indexer_select_all(
    batch: ForwardBatch, x: torch.Tensor, indexer_q: torch.Tensor, indexer_w: torch.Tensor, visible: torch.Tensor,
    w: AttentionWeights, ctx: LayerContext, caches: LayerCaches, tables: ChunkTables,
) -> torch.Tensor:
    """`_indexer_select` of every chunk: the indexer's compressor over all rows at once, then the
    scores and top-k → entry ids [T, k], −1 padded. With the cache-reading scores kernel, one
    launch each over per-row key lists (row t: its sequence's first visible[t] keys, −1 after, as
    the decode step does); else each chunk scores its own sequence's key list."""
    cfg, kernels, positions = ctx.config, ctx.kernels, batch.positions
    site = indexer_compressor_site(cfg)
    run_compressor(x, positions, w.indexer.compressor, site, tables.compressor(site), ctx,
                   caches.indexer_state, caches.indexer)
    if kernels.indexer_scores_cache is not None:
        width = candidate_width(batch.chunks, site.spec.ratio)
        if width == 0:
            return positions.new_empty(positions.shape[0], 0)
        scores = kernels.indexer_scores_cache(indexer_q, indexer_w, caches.indexer,
                                              tables.candidates(Pool.INDEXER, site.spec.ratio)[1])
        return kernels.topk(scores, min(cfg.index_topk, width), num_valid=visible)
    picks = []
    for index, chunk in enumerate(batch.chunks):
        rows = slice(chunk.token_offset, chunk.token_offset + chunk.num_tokens)
        num_entries = chunk.end_pos // site.spec.ratio  # the largest visible count of the chunk's rows
        if num_entries == 0:
            picks.append(positions.new_empty(chunk.num_tokens, 0))
            continue
        key_slots = tables.chunk_slots(Pool.INDEXER, index, num_entries)
        scores = kernels.indexer_scores(indexer_q[rows], indexer_w[rows], caches.indexer.read(key_slots))
        picks.append(kernels.topk(scores, min(cfg.index_topk, num_entries), num_valid=visible[rows]))
    width = max(p.shape[1] for p in picks)
    return torch.cat([torch.nn.functional.pad(p, (0, width - p.shape[1]), value=-1) for p in picks])


def main_compressor_site(ctx: LayerContext) -> CompressorSite:
    """The layer's own compressor: CSA (overlapping windows of compress_rate_csa) or HCA."""
    return kind_compressor_site(ctx.config, ctx.kind)


def _chunk_compressor_addresses(positions: torch.Tensor, site: CompressorSite, state: ModelCacheState,
                                seq) -> CompressorAddresses:
    return compressor_addresses(positions, site.spec, state_slots_of=lambda p: state.slots(site.state_pool, seq, p),
                                entry_slots_of=lambda s: state.slots(site.entry_pool, seq, s))


def run_compressor(x: torch.Tensor, positions: torch.Tensor, weights: CompressorWeights, site: CompressorSite,
                   addresses: CompressorAddresses, ctx: LayerContext, state_cache, entry_cache) -> None:
    """One compressor step of this layer's numerics over rows x at positions (see `compressor_step`)."""
    cfg, policy = ctx.config, ctx.policy
    compressor_step(x, positions, weights, site.spec, addresses, state_cache=state_cache, entry_cache=entry_cache,
                    inv_freq=ctx.inv_freq, rms_eps=cfg.rms_norm_eps, out_dtype=policy.stream_dtype,
                    round_pooled_to_bf16=policy.round_compressed_to_bf16, kernels=ctx.kernels)


def _indexer_select(
    chunk: SequenceChunk, positions: torch.Tensor, x: torch.Tensor, indexer_q: torch.Tensor, indexer_w: torch.Tensor,
    visible: torch.Tensor, w: AttentionWeights, ctx: LayerContext, caches: LayerCaches, state: ModelCacheState,
    observer: ForwardObserver | None,
) -> torch.Tensor:
    """Run the indexer's compressor, score the causal candidates, pick the tie-broken top-k."""
    cfg, seq = ctx.config, chunk.seq_id
    site = indexer_compressor_site(cfg)
    run_compressor(x, positions, w.indexer.compressor, site, _chunk_compressor_addresses(positions, site, state, seq),
                   ctx, caches.indexer_state, caches.indexer)
    num_entries = int(visible.max())
    if num_entries == 0:
        return torch.empty(positions.shape[0], 0, dtype=torch.int64, device=positions.device)
    all_ids = torch.arange(num_entries, device=positions.device)
    key_slots = state.slots(Pool.INDEXER, seq, all_ids)
    keys = None
    if observer is not None or ctx.kernels.indexer_scores_cache is None:
        keys = caches.indexer.read(key_slots)
    if observer is not None:
        observer.on_attention_values(ctx.layer_id, seq, "indexer key cache reader", keys)
    if ctx.kernels.indexer_scores_cache is None:
        scores = ctx.kernels.indexer_scores(indexer_q, indexer_w, keys)  # [T, N]
    else:
        scores = ctx.kernels.indexer_scores_cache(indexer_q, indexer_w, caches.indexer, key_slots)
    k = min(cfg.index_topk, num_entries)
    return ctx.kernels.topk(scores, k, num_valid=visible)
