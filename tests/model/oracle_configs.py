"""Tiny DeepSeek-V4 configs for the transformers oracle (issue 3 acceptance).

Together they cover: sliding, CSA and HCA layers; hash and learned MoE; hc_mult 4; more than one
output group; small compress ratios so ~300 tokens cross many compressed windows; 16+ indexer
heads (no exact score ties, see the issue) with an index_topk well below the candidate count.
"""

from __future__ import annotations

from mxserve.config import ModelConfig

_COMMON = dict(
    vocab_size=512, hc_mult=4, hc_sinkhorn_iters=20, rope_theta=10000.0, compress_rope_theta=160000.0,
    quantization=None, num_nextn_predict_layers=0, max_position_embeddings=4096,
)

ORACLE_CONFIGS: dict[str, ModelConfig] = {
    # every layer type once, hash then learned MoE, 2 output groups, CSA 4 / HCA 16
    "mixed": ModelConfig(
        **_COMMON, hidden_size=256, num_hidden_layers=4, compress_ratios=(0, 4, 16, 4),
        compress_rate_csa=4, compress_rate_hca=16, num_attention_heads=8, head_dim=512, qk_rope_head_dim=64,
        q_lora_rank=128, o_groups=2, o_lora_rank=128, sliding_window=32, index_n_heads=16, index_head_dim=128,
        index_topk=8, n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=128, num_hash_layers=2,
    ),
    # HCA-first (V4-Pro style), smaller head_dim, 4 output groups, CSA 4 / HCA 8
    "hca_first": ModelConfig(
        **_COMMON, hidden_size=128, num_hidden_layers=4, compress_ratios=(8, 4, 8, 0),
        compress_rate_csa=4, compress_rate_hca=8, num_attention_heads=8, head_dim=256, qk_rope_head_dim=64,
        q_lora_rank=64, o_groups=4, o_lora_rank=64, sliding_window=16, index_n_heads=16, index_head_dim=128,
        index_topk=16, n_routed_experts=16, num_experts_per_tok=4, moe_intermediate_size=64, num_hash_layers=1,
    ),
    # CSA-heavy, 32 indexer heads, topk 32 (selection still non-trivial past 128 tokens), 3 hash layers
    "csa_heavy": ModelConfig(
        **_COMMON, hidden_size=128, num_hidden_layers=4, compress_ratios=(4, 4, 32, 4),
        compress_rate_csa=4, compress_rate_hca=32, num_attention_heads=4, head_dim=512, qk_rope_head_dim=64,
        q_lora_rank=64, o_groups=2, o_lora_rank=64, sliding_window=64, index_n_heads=32, index_head_dim=128,
        index_topk=32, n_routed_experts=8, num_experts_per_tok=3, moe_intermediate_size=64, num_hash_layers=3,
    ),
}

# Few indexer heads make the score exactly 0 whenever every head's dot product is negative:
# many exact ties. Not an oracle config (transformers' torch.topk breaks ties arbitrarily);
# used to show that mxserve's tie-break makes prefill, chunks and decode select the same set.
TIED_CONFIGS: dict[str, ModelConfig] = {
    "tied_indexer": ModelConfig(
        **_COMMON, hidden_size=128, num_hidden_layers=2, compress_ratios=(4, 4), compress_rate_csa=4,
        compress_rate_hca=16, num_attention_heads=4, head_dim=256, qk_rope_head_dim=64, q_lora_rank=64, o_groups=2,
        o_lora_rank=64, sliding_window=16, index_n_heads=1, index_head_dim=128, index_topk=4, n_routed_experts=4,
        num_experts_per_tok=2, moe_intermediate_size=64, num_hash_layers=1,
    ),
}

ALL_TEST_CONFIGS: dict[str, ModelConfig] = {**ORACLE_CONFIGS, **TIED_CONFIGS}
