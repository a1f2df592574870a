"""What one step of one layer must read (bytes) and compute (FLOPs): the floors we measure against.

Bytes (each counted once per step, as an ideal kernel would stream them):
* weights: every tensor of the layer except the routed experts, plus the routed experts the
  step's router actually chose (distinct ids over the batch, captured from the `route` op);
* caches, per sequence: the window entries in reach (positions [C+T−W, C+T)), CSA: every visible
  indexer key plus the selected compressed entries (at most top-k per query, at most all of
  them), HCA: every visible compressed entry. Compressor state rows read when an entry is
  emitted (2·ratio rows, every ratio-th token) are left out: they are < 1% at these shapes.
FLOPs (for prefill): 2 per multiply-add of every linear a token passes through (attention,
compressor, indexer, router, shared expert, its top-k routed experts), plus attention
(QKᵀ and PV over the keys each query sees: 4·H·d per key) and indexer scores (2·H_I·d_I per key).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from mxserve.bench.layers.build import weight_bytes
from mxserve.config import AttentionKind, ModelConfig
from mxserve.formats import QuantizedWeight

Weights = Mapping[str, torch.Tensor | QuantizedWeight]


def _is_routed_expert(name: str, layer_id: int) -> bool:
    return name.startswith(f"layers.{layer_id}.ffn.experts.")


def layer_weight_bytes(weights: Weights, layer_id: int) -> tuple[int, dict[int, int]]:
    """(bytes of everything but the routed experts, expert id → bytes of its w1 + w2 + w3)."""
    prefix = f"layers.{layer_id}."
    dense, experts = 0, {}
    for name, w in weights.items():
        if not name.startswith(prefix):
            continue
        if _is_routed_expert(name, layer_id):
            expert_id = int(name.split(".")[4])
            experts[expert_id] = experts.get(expert_id, 0) + weight_bytes(w)
        elif not name.endswith("tid2eid"):  # a hash layer reads T rows of the table, not all of it
            dense += weight_bytes(w)
    return dense, experts


def routed_bytes(expert_bytes: Mapping[int, int], expert_ids: Sequence[torch.Tensor]) -> int:
    chosen = set()
    for ids in expert_ids:
        chosen.update(int(e) for e in torch.unique(ids).tolist())
    return sum(expert_bytes[e] for e in chosen)


def cache_read_bytes(config: ModelConfig, kind: AttentionKind, *, num_seqs: int, context_len: int, new_tokens: int,
                     kv_entry_bytes: int, indexer_entry_bytes: int) -> int:
    end = context_len + new_tokens
    window = end - max(0, context_len - config.sliding_window + 1)
    per_seq = window * kv_entry_bytes
    if kind is AttentionKind.CSA:
        visible = end // config.compress_rate_csa
        per_seq += visible * indexer_entry_bytes + min(visible, config.index_topk * new_tokens) * kv_entry_bytes
    elif kind is AttentionKind.HCA:
        per_seq += (end // config.compress_rate_hca) * kv_entry_bytes
    return num_seqs * per_seq


def active_params_per_token(config: ModelConfig, kind: AttentionKind) -> int:
    c, h = config, config.hidden_size
    attn = (c.q_lora_rank * h + c.num_attention_heads * c.head_dim * c.q_lora_rank + c.head_dim * h
            + c.o_groups * c.o_lora_rank * c.num_attention_heads * c.head_dim // c.o_groups + h * c.o_groups * c.o_lora_rank)
    if kind is not AttentionKind.SLIDING:
        overlap = 2 if kind is AttentionKind.CSA else 1
        attn += 2 * overlap * c.head_dim * h
    if kind is AttentionKind.CSA:
        attn += c.index_n_heads * c.index_head_dim * c.q_lora_rank + c.index_n_heads * h + 2 * 2 * c.index_head_dim * h
    expert = 3 * c.moe_intermediate_size * h
    return attn + c.n_routed_experts * h + (c.num_experts_per_tok + c.n_shared_experts) * expert


def step_flops(config: ModelConfig, kind: AttentionKind, *, num_seqs: int, context_len: int, new_tokens: int) -> float:
    c = config
    positions = torch.arange(context_len, context_len + new_tokens, dtype=torch.float64)
    keys = torch.clamp(positions + 1, max=c.sliding_window)
    indexer = torch.zeros_like(positions)
    if kind is AttentionKind.CSA:
        visible = torch.div(positions + 1, c.compress_rate_csa, rounding_mode="floor")
        keys = keys + torch.clamp(visible, max=c.index_topk)
        indexer = 2 * c.index_n_heads * c.index_head_dim * visible
    elif kind is AttentionKind.HCA:
        keys = keys + torch.div(positions + 1, c.compress_rate_hca, rounding_mode="floor")
    attention = 4 * c.num_attention_heads * c.head_dim * keys
    per_seq = float((attention + indexer).sum()) + 2.0 * new_tokens * active_params_per_token(c, kind)
    return num_seqs * per_seq
