"""One rank's DeepSeek-V4: the reference model's math on the rank's shards, plus the collectives.

The rank's weights are bound by `DeepseekV4Model` itself (with `plan.rank_config()`, whose head
count is the rank's), so attention up to the output projection is the single-process code
unchanged (`attention_heads`). This module supplies the sharded steps:

* vocab-parallel embedding: each rank looks up the ids in its vocab range, zeros elsewhere, and
  one all-reduce assembles the rows (a sum with zeros: bit-exact);
* the output projection: grouped `wo_a` on the rank's groups (or its heads' part of one group,
  all-reduced inside the group so the stream-dtype rounding and the FP8 QAT of `wo_b`'s input see
  the whole group output), then row-parallel `wo_b`, all-reduced in fp32 before rounding;
* the MoE block: routing replicated on every rank; expert shards (or, with EP, the rank's whole
  experts) and the shared expert's shard add into one fp32 partial; one all-reduce combines;
* the head: each rank's vocab columns of the logits, all-gathered in rank order.

Compared with one process, only the order of fp32 additions in the all-reduced partial sums
changes (a few ulp); docs/parallelism.md has the measured differences.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from mxserve.config import ModelConfig
from mxserve.distributed.groups import ParallelGroups
from mxserve.distributed.plan import ShardingPlan
from mxserve.distributed.rank_kernels import (
    choose_moe_and_attention,
    own_experts_only,
    rank_linear_kernels,
    uses_resident_weights,
)
from mxserve.kernels.linear import Weight
from mxserve.model.attention import AttentionWeights, LayerContext, attention_heads
from mxserve.model.deepseek_v4 import DeepseekV4Model
from mxserve.model.forward_batch import ForwardBatch
from mxserve.model.kv_state import ModelCacheState
from mxserve.model.moe import MoEWeights
from mxserve.model.norms import rms_norm


class TensorParallelModel:
    def __init__(
        self, config: ModelConfig, weights: Mapping[str, Weight], plan: ShardingPlan, groups: ParallelGroups, *,
        numerics: str, kv_cache_dtype: str | None, resident_weights: bool,
        kernel_overrides: Mapping[str, str] | None = None, max_model_len: int | None = None,
        device: torch.device | str = "cpu",
    ) -> None:
        """`weights`: this rank's shards (`load_rank_weights`) on `device`; `config`: the full model's.
        `kernel_overrides` (resolved by the driver): the kernels are chosen per layer over this
        rank's shards with the single-process chooser code (`rank_kernels`); `max_model_len` sizes
        the attention chooser's indexer limit (default: the model's maximum)."""
        self.config, self.plan, self.groups = config, plan, groups
        rank, device = groups.rank, torch.device(device)
        overrides = dict(kernel_overrides or {})
        if resident_weights and not uses_resident_weights(overrides):
            raise ValueError(f"resident decoded weights cannot run the forced linear backend {overrides['linear']!r}")
        linear = rank_linear_kernels(weights, plan, rank, device, numerics=numerics, overrides=overrides)
        self.local = DeepseekV4Model(plan.rank_config(), weights, numerics=numerics, kv_cache_dtype=kv_cache_dtype,
                                     resident_weights=resident_weights, kernels=linear)
        own_experts_only(self.local, plan, rank)  # EP: each layer's experts are the rank's own
        choose_moe_and_attention(self.local, device, overrides=overrides,
                                 max_model_len=max_model_len or config.max_position_embeddings)
        self.policy = self.local.policy
        self.vocab_start, self.vocab_stop = plan.vocab_range(rank)
        self.expert_start, self.expert_stop = plan.expert_range(rank)
        self.moe_replica = plan.moe_shard(rank)[1]

    def new_cache_state(self, *, max_sequences: int, max_positions: int, block_size: int = 64,
                        device: torch.device | str = "cpu") -> ModelCacheState:
        """Caches of the full model: every rank holds the single KV head's caches whole."""
        return ModelCacheState.for_sequences(self.config, self.policy, max_sequences=max_sequences,
                                             max_positions=max_positions, block_size=block_size, device=device)

    # ------------------------------------------------------------------ forward
    @torch.no_grad()
    def forward(self, batch: ForwardBatch, state: ModelCacheState) -> torch.Tensor:
        """The same contract as `DeepseekV4Model.forward`; every rank returns the full logits."""
        cfg, sd, local = self.config, self.policy.stream_dtype, self.local
        if batch.num_tokens == 0:
            return torch.zeros(0, cfg.vocab_size)
        if int(batch.token_ids.max()) >= cfg.vocab_size or int(batch.token_ids.min()) < 0:
            raise ValueError(f"token ids must lie in [0, {cfg.vocab_size}); got {batch.token_ids.min()}..{batch.token_ids.max()}")
        hc_args = dict(hc_eps=cfg.hc_eps, rms_eps=cfg.rms_norm_eps)
        streams = self._embed(batch.token_ids).to(sd)[:, None, :].expand(-1, cfg.hc_mult, -1).contiguous()
        for hc_attn, attn_norm, attention, hc_ffn, ffn_norm, moe, ctx in local.layers:
            kernels = ctx.kernels
            block_in, post, comb = kernels.hc_pre(streams, hc_attn, sinkhorn_iters=cfg.hc_sinkhorn_iters, **hc_args)
            heads = attention_heads(rms_norm(block_in, attn_norm, cfg.rms_norm_eps), batch, attention, ctx,
                                    state.layers[ctx.layer_id], state)
            streams = kernels.hc_post(self._output_projection(heads, attention, ctx), streams, post, comb)
            block_in, post, comb = kernels.hc_pre(streams, hc_ffn, sinkhorn_iters=cfg.hc_sinkhorn_iters, **hc_args)
            out = self._moe(rms_norm(block_in, ffn_norm, cfg.rms_norm_eps), batch.token_ids, moe)
            streams = kernels.hc_post(out, streams, post, comb)
        if batch.logits_rows is not None:
            streams = streams[batch.logits_rows]
        hidden = rms_norm(local.kernels.hc_head(streams, *local.hc_head_weights, **hc_args), local.final_norm,
                          cfg.rms_norm_eps)
        return self.groups.all_gather_last_dim(local.kernels.linear(hidden, local.head))

    def _embed(self, token_ids: torch.Tensor) -> torch.Tensor:
        local_ids = token_ids - self.vocab_start
        mine = (local_ids >= 0) & (token_ids < self.vocab_stop)
        rows = self.local.embed[torch.where(mine, local_ids, 0)].float()
        rows = torch.where(mine[:, None], rows, torch.zeros((), dtype=rows.dtype, device=rows.device))
        return self.groups.all_reduce(rows).to(self.local.embed.dtype)

    def _output_projection(self, heads: torch.Tensor, w: AttentionWeights, ctx: LayerContext) -> torch.Tensor:
        """heads [T, H/N, d] → [T, D] stream dtype, the sum over every rank's part."""
        kernels, policy, plan = ctx.kernels, ctx.policy, self.plan
        sd, num_tokens = policy.stream_dtype, heads.shape[0]
        if plan.ranks_per_group == 1:  # whole groups: wo_a local, wo_b row-parallel
            grouped = kernels.grouped_linear(heads.reshape(num_tokens, plan.groups_per_rank, -1), w.wo_a, out_dtype=sd)
            partial = kernels.linear(grouped.flatten(1), w.wo_b, quantize_input=policy.quantize_gemm_inputs)
            return self.groups.all_reduce(partial).to(sd)
        # A group over several ranks: sum the group output inside the group first, so that its
        # rounding to the stream dtype and wo_b's input QAT see exactly what one process sees.
        group_out = kernels.grouped_linear(heads.reshape(num_tokens, 1, -1), w.wo_a)  # fp32 partial [T, 1, R]
        group_out = self.groups.all_reduce(group_out, self.groups.attention_group).to(sd)
        rows = kernels.linear(group_out.flatten(1), w.wo_b, quantize_input=policy.quantize_gemm_inputs)  # [T, D/m]
        member = self.groups.rank % plan.ranks_per_group
        full = rows.new_zeros(num_tokens, self.config.hidden_size)
        full[:, member * rows.shape[1] : (member + 1) * rows.shape[1]] = rows
        return self.groups.all_reduce(full).to(sd)

    def _moe(self, x: torch.Tensor, token_ids: torch.Tensor, w: MoEWeights) -> torch.Tensor:
        """x [T, D] (normed, stream dtype) → [T, D] stream dtype, the sum over every rank's part."""
        cfg, policy, kernels = self.config, self.policy, self.local.kernels
        qi, sd = policy.quantize_gemm_inputs, policy.stream_dtype
        common = dict(limit=cfg.swiglu_limit, quantize_inputs=qi, hidden_dtype=sd)
        weights, expert_ids = kernels.route(
            x, w.gate, top_k=cfg.num_experts_per_tok, routed_scaling=cfg.routed_scaling_factor,
            bias=w.bias, tid2eid=w.tid2eid, token_ids=token_ids,
        )
        out = torch.zeros(x.shape[0], x.shape[1], dtype=torch.float32, device=x.device)
        # Ranks holding the same expert shard (moe_tp < N) split the tokens between them.
        mine = torch.tensor_split(torch.arange(x.shape[0], device=x.device), self.plan.moe_replicas)[self.moe_replica]
        if self.plan.expert_parallel:
            # Dispatch: every rank holds every token (attention is tensor-parallel), so a rank picks
            # the (token, slot) pairs routed to its experts; the all-reduce below is the combine.
            owned = (expert_ids >= self.expert_start) & (expert_ids < self.expert_stop)
            token_idx, slot = torch.nonzero(owned, as_tuple=True)
            if token_idx.numel():
                y = kernels.moe_experts(
                    x[token_idx], (expert_ids[token_idx, slot] - self.expert_start)[:, None],
                    weights[token_idx, slot][:, None], w.experts, **common,  # the rank's own (own_experts_only)
                )
                out.index_add_(0, token_idx, y)
        elif mine.numel():
            out[mine] += kernels.moe_experts(x[mine], expert_ids[mine], weights[mine], w.experts, **common)
        if w.shared is not None and mine.numel():
            out[mine] += kernels.expert_ffn(x[mine], w.shared, **common)
        return self.groups.all_reduce(out).to(sd)
