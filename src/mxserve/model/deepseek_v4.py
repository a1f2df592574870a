"""The DeepSeek-V4 reference model: the whole forward of spec §3 on a varlen batch.

`DeepseekV4Model(config, weights, numerics)` binds a loaded checkpoint (release names, quantized
linears kept packed) to the math; `forward(batch, cache_state)` runs one step — a prefill, a
prefill chunk or a decode, for any number of sequences at once — writing every layer's caches
and returning fp32 logits for the requested rows. MTP/DSpark weights may be present in the
mapping; they are not used here (`mxserve.model.dspark` runs the 0731 draft, fed by
`forward_with_aux`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence

import torch

from mxserve.config import AttentionKind, ModelConfig
from mxserve.formats import QuantizedWeight
from mxserve.kernels.moe import ExpertWeights
from mxserve.model.attention import (
    AttentionWeights,
    IndexerWeights,
    LayerContext,
    attention_forward,
    output_projection,
)
from mxserve.model.compressor import CompressorWeights
from mxserve.model.decode_addresses import DecodeAddresses
from mxserve.model.decode_attention import decode_attention_heads
from mxserve.model.decode_batch import DecodeBatch, DecodeGeometry
from mxserve.model.decode_branches import decode_branches_enabled
from mxserve.model.forward_batch import ForwardBatch
from mxserve.model.hyper_connection import HyperConnectionWeights, hc_head_normed, hc_pre_normed
from mxserve.model.kernel_set import REFERENCE_KERNELS, KernelSet
from mxserve.model.kv_state import ModelCacheState
from mxserve.model.moe import MoEWeights, moe_forward_parts, moe_output
from mxserve.model.numerics import KVCacheDtype, NumericMode, NumericPolicy
from mxserve.model.observer import ForwardObserver
from mxserve.model.rope import RopeTables
from mxserve.model.weights import WeightStore


class DeepseekV4Model:
    def __init__(
        self,
        config: ModelConfig,
        weights: Mapping[str, torch.Tensor | QuantizedWeight],
        *,
        numerics: NumericMode | str | NumericPolicy = NumericMode.FAITHFUL,
        kv_cache_dtype: KVCacheDtype | str | None = None,
        resident_weights: bool = False,
        observer: ForwardObserver | None = None,
        kernels: KernelSet = REFERENCE_KERNELS,
    ) -> None:
        """`numerics`: a named mode, or a full NumericPolicy (ablations pick single QAT points).
        `resident_weights`: decode every linear once into fp64 and keep it (bit-identical results,
        8 B/parameter; the engine picks it for small models on the CPU).
        `observer`: optional verification hook (`mxserve.model.observer`); may be set later as an
        attribute. None (the default) costs one `is None` test per site.
        `kernels`: the op implementations (`mxserve.model.kernel_set`); all references by default."""
        self.config = config
        self.kernels = kernels
        self.observer = observer
        if isinstance(numerics, NumericPolicy):
            if kv_cache_dtype is not None:
                raise ValueError("pass kv_cache_dtype inside the NumericPolicy, not beside it")
            self.policy = numerics
        else:
            self.policy = NumericPolicy.for_mode(numerics, kv_cache_dtype)
        store = WeightStore(weights, resident=resident_weights)
        self.embed = store.tensor("embed.weight")
        self.rope = RopeTables(config, device=self.embed.device)
        self.head = store.linear("head")
        self.final_norm = store.tensor("norm.weight")
        self.hc_head_weights = (store.tensor("hc_head_fn"), store.tensor("hc_head_base"), store.tensor("hc_head_scale"))
        self.layers = [self._bind_layer(store, i) for i in range(config.num_hidden_layers)]

    # ------------------------------------------------------------------ weights
    def _bind_layer(self, store: WeightStore, i: int):
        cfg, p = self.config, f"layers.{i}."
        kind = cfg.attention_kind(i)

        def hc(site: str) -> HyperConnectionWeights:
            return HyperConnectionWeights(
                store.tensor(f"{p}hc_{site}_fn"), store.tensor(f"{p}hc_{site}_base"), store.tensor(f"{p}hc_{site}_scale")
            )

        def compressor(q: str) -> CompressorWeights:
            return CompressorWeights(
                store.linear(f"{q}wkv"), store.linear(f"{q}wgate"), store.tensor(f"{q}ape"), store.tensor(f"{q}norm.weight")
            )

        def expert(q: str) -> ExpertWeights:
            return ExpertWeights(store.linear(f"{q}w1"), store.linear(f"{q}w2"), store.linear(f"{q}w3"))

        a = f"{p}attn."
        attention = AttentionWeights(
            wq_a=store.linear(f"{a}wq_a"), q_norm=store.tensor(f"{a}q_norm.weight"), wq_b=store.linear(f"{a}wq_b"),
            wkv=store.linear(f"{a}wkv"), kv_norm=store.tensor(f"{a}kv_norm.weight"), wo_a=store.linear(f"{a}wo_a"),
            wo_b=store.linear(f"{a}wo_b"), sink=store.tensor(f"{a}attn_sink"),
            compressor=compressor(f"{a}compressor.") if kind is not AttentionKind.SLIDING else None,
            indexer=IndexerWeights(
                store.linear(f"{a}indexer.wq_b"), store.linear(f"{a}indexer.weights_proj"),
                compressor(f"{a}indexer.compressor."),
            ) if kind is AttentionKind.CSA else None,
        )
        f = f"{p}ffn."
        is_hash = cfg.is_hash_layer(i)
        moe = MoEWeights(
            gate=store.tensor(f"{f}gate.weight"),
            bias=None if is_hash else store.tensor(f"{f}gate.bias"),
            tid2eid=store.tensor(f"{f}gate.tid2eid") if is_hash else None,
            experts=tuple(expert(f"{f}experts.{e}.") for e in range(cfg.n_routed_experts)),
            shared=expert(f"{f}shared_experts.") if cfg.n_shared_experts else None,
        )
        return (
            hc("attn"), store.tensor(f"{p}attn_norm.weight"), attention,
            hc("ffn"), store.tensor(f"{p}ffn_norm.weight"), moe,
            LayerContext(cfg, self.policy, i, kind, self.rope.for_kind(kind), self.kernels),
        )

    def set_kernels(self, kernels: KernelSet) -> None:
        """Swap the op implementations (tests and `mxserve verify` compare single ops this way)."""
        self.kernels = kernels
        self.layers = [(*layer[:-1], dataclasses.replace(layer[-1], kernels=kernels)) for layer in self.layers]

    # ------------------------------------------------------------------ forward
    def new_cache_state(self, *, max_sequences: int, max_positions: int, block_size: int = 64,
                        device: torch.device | str = "cpu") -> ModelCacheState:
        return ModelCacheState.for_sequences(self.config, self.policy, max_sequences=max_sequences,
                                             max_positions=max_positions, block_size=block_size, device=device)

    @torch.no_grad()
    def forward(self, batch: ForwardBatch, state: ModelCacheState) -> torch.Tensor:
        """One step over `batch`; returns fp32 logits [L, vocab] for batch.logits_rows (or every row)."""
        return self._forward(batch, state, ())[0]

    @torch.no_grad()
    def forward_with_aux(
        self, batch: ForwardBatch, state: ModelCacheState, aux_layer_ids: Sequence[int]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`forward`, plus the DSpark draft's input (dsv4-0731 §3.2 step 1): for every token row
        of the batch (not only the logits rows), the mean over the hc streams of the residual
        AFTER each layer in `aux_layer_ids`, concatenated in that order → [T, len(ids)·D] in the
        stream dtype. The logits are bit-identical to `forward`'s."""
        return self._forward(batch, state, tuple(aux_layer_ids))

    def _forward(
        self, batch: ForwardBatch, state: ModelCacheState, aux_layer_ids: tuple[int, ...]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        cfg, sd = self.config, self.policy.stream_dtype
        if batch.num_tokens == 0:
            return torch.zeros(0, cfg.vocab_size), torch.zeros(0, len(aux_layer_ids) * cfg.hidden_size, dtype=sd)
        low, high = torch.stack(torch.aminmax(batch.token_ids)).tolist()  # one host read (was two)
        if high >= cfg.vocab_size or low < 0:
            raise ValueError(f"token ids must lie in [0, {cfg.vocab_size}); got {low}..{high}")
        observer = self.observer
        captured: dict[int, torch.Tensor] = {}

        def attend(x: torch.Tensor, attention: AttentionWeights, ctx: LayerContext) -> torch.Tensor:
            return attention_forward(x, batch, attention, ctx, state.layers[ctx.layer_id], state, observer)

        def after_moe(ctx: LayerContext, out: torch.Tensor) -> None:
            observer.on_moe_output(ctx.layer_id, batch, out)

        def after_layer(ctx: LayerContext, streams: torch.Tensor) -> None:
            if observer is not None:
                observer.on_layer_output(ctx.layer_id, batch, streams)
            if ctx.layer_id in aux_layer_ids:
                captured[ctx.layer_id] = _hc_mean(streams, sd)

        streams = self._layers(batch.token_ids, attend, after_moe if observer is not None else None, after_layer)
        aux = torch.cat([captured[i] for i in aux_layer_ids], dim=-1) if aux_layer_ids else streams.new_empty(0)
        if batch.logits_rows is not None:
            streams = streams[batch.logits_rows]
        return self._logits(streams), aux

    @torch.no_grad()
    def decode_forward(self, batch: DecodeBatch, state: ModelCacheState, geometry: DecodeGeometry) -> torch.Tensor:
        """A pure-decode step (one token per row): fp32 logits [B, vocab] for every row, padding rows
        included (the caller drops them). Static shapes for a given (B, geometry) and no host sync in
        the model's own code, so it can be captured in a CUDA graph (`supports_cuda_graphs`); logits
        and cache bytes are bit-identical to `forward` on the same tokens as chunks of one. The
        inputs are validated on the host by `build_decode_batch`; the observer is not called (the
        engine runs `forward` when one is set)."""
        return self._decode(batch, state, geometry, None, ())[0]

    @torch.no_grad()
    def decode_forward_with_aux(
        self, batch: DecodeBatch, state: ModelCacheState, geometry: DecodeGeometry, aux_layer_ids: Sequence[int], *,
        addresses: DecodeAddresses | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`decode_forward`, plus the DSpark input of every row (as `forward_with_aux`: the hc-mean
        after each layer in `aux_layer_ids`) → (logits [B, vocab], aux [B, len(ids)·D]). Rows may
        be several consecutive positions of one sequence (a speculative verify): every op writes all
        rows' cache entries before any row reads them, so each row computes exactly what a one-token
        decode at its position would. `addresses`: the step's slot maps when the caller needs them
        too (the speculative rollback saves the slots this step writes); built here otherwise."""
        return self._decode(batch, state, geometry, addresses, tuple(aux_layer_ids))

    def _decode(self, batch: DecodeBatch, state: ModelCacheState, geometry: DecodeGeometry,
                addresses: DecodeAddresses | None, aux_layer_ids: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
        if addresses is None:
            addresses = DecodeAddresses(batch, geometry, self.config)
        branches = decode_branches_enabled(batch.positions.device)
        if branches:
            addresses.prime()  # every map on this stream before the first fork (decode_branches)
        captured: dict[int, torch.Tensor] = {}

        def attend(x: torch.Tensor, attention: AttentionWeights, ctx: LayerContext) -> torch.Tensor:
            heads = decode_attention_heads(x, addresses, attention, ctx, state.layers[ctx.layer_id], branches=branches)
            return output_projection(heads, attention, ctx)

        def after_layer(ctx: LayerContext, streams: torch.Tensor) -> None:
            if ctx.layer_id in aux_layer_ids:
                captured[ctx.layer_id] = _hc_mean(streams, self.policy.stream_dtype)

        streams = self._layers(batch.token_ids, attend, after_layer=after_layer if aux_layer_ids else None,
                               branches=branches)
        aux = torch.cat([captured[i] for i in aux_layer_ids], dim=-1) if aux_layer_ids else streams.new_empty(0)
        return self._logits(streams), aux

    # CUDA graphs (mxserve.engine.cuda_graphs): pure-decode steps can run `decode_forward`, whose
    # shapes depend only on (bucket, DecodeGeometry) and which never syncs with the host itself.
    supports_cuda_graphs = True

    def _layers(
        self, token_ids: torch.Tensor, attend: Callable[[torch.Tensor, AttentionWeights, LayerContext], torch.Tensor],
        after_moe: Callable[[LayerContext, torch.Tensor], None] | None = None,
        after_layer: Callable[[LayerContext, torch.Tensor], None] | None = None, branches: bool = False,
    ) -> torch.Tensor:
        """Embedding and every block (hc_pre → norm → attention → hc_post → hc_pre → norm → MoE →
        hc_post); `attend(normed x [T, D], weights, ctx) -> [T, D]` is the attention of one layer.
        `branches`: the MoE's shared expert beside the routed ones (`decode_branches`).
        Returns the hc streams [T, hc, D] after the last layer."""
        cfg, sd = self.config, self.policy.stream_dtype
        hc_args = dict(hc_eps=cfg.hc_eps, rms_eps=cfg.rms_norm_eps, sinkhorn_iters=cfg.hc_sinkhorn_iters)
        # one gather straight into the hc streams [T, hc, D] (not a gather, then a copy of the expand)
        streams = self.embed[token_ids[:, None].expand(-1, cfg.hc_mult)].to(sd)
        for hc_attn, attn_norm, attention, hc_ffn, ffn_norm, moe, ctx in self.layers:
            kernels = ctx.kernels
            normed, post, comb = hc_pre_normed(kernels, streams, hc_attn, attn_norm, **hc_args)
            out = attend(normed, attention, ctx)
            streams = kernels.hc_post(out, streams, post, comb)
            normed, post, comb = hc_pre_normed(kernels, streams, hc_ffn, ffn_norm, **hc_args)
            routed, shared = moe_forward_parts(normed, token_ids, moe, cfg, self.policy, self.kernels,
                                               branches=branches)
            if after_moe is None and shared is not None:  # hc_post adds and rounds them (moe_forward's ops)
                streams = kernels.hc_post(routed, streams, post, comb, addend=shared)
            else:
                out = moe_output(routed, shared, sd)
                if after_moe is not None:
                    after_moe(ctx, out)
                streams = kernels.hc_post(out, streams, post, comb)
            if after_layer is not None:
                after_layer(ctx, streams)
        return streams

    def _logits(self, streams: torch.Tensor) -> torch.Tensor:
        cfg = self.config
        hidden = hc_head_normed(self.kernels, streams, self.hc_head_weights, self.final_norm, hc_eps=cfg.hc_eps,
                                rms_eps=cfg.rms_norm_eps)
        return self.kernels.linear(hidden, self.head)


def _hc_mean(streams: torch.Tensor, stream_dtype: torch.dtype) -> torch.Tensor:
    """The DSpark capture of one layer's output: the mean over the hc streams [T, hc, D] → [T, D],
    in fp64 (order-free, batch invariant), rounded once to the stream dtype."""
    return streams.double().mean(dim=1).to(stream_dtype)
