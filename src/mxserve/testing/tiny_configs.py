"""Named model configs for tests, examples and benchmarks.

* `tiny-all`: every layer and MoE type in 6 main layers (sliding, CSA, HCA; hash and learned
  routing, a CSA layer that is hash-routed), one preview MTP block. Head dim 512 with 64 RoPE
  channels keeps the real fp8_ds_mla cache entry (448 + 64) applicable; 2 output groups exercise
  the grouped output projection; HCA ratio 16 keeps sequences short. Every dimension is a
  multiple of the 128x128 FP8 block and the 32-wide MX group.
* `tiny-0731`: the same main model in the 0731 layout: a 3-stage DSpark draft fed by main
  layers 3, 4, 5, `compress_ratios` with 3 trailing zeros, the stale `num_nextn_predict_layers=1`.
* `flash`: the real DeepSeek-V4-Flash config (ModelConfig defaults), for full-size benchmarks.
"""

from __future__ import annotations

from mxserve.config import ConfigError, DSparkConfig, ModelConfig

_TINY_MAIN = dict(
    vocab_size=512,
    hidden_size=256,
    num_hidden_layers=6,
    num_attention_heads=8,
    head_dim=512,
    qk_rope_head_dim=64,
    q_lora_rank=128,
    o_groups=2,
    o_lora_rank=128,
    sliding_window=32,
    index_n_heads=16,
    index_head_dim=128,
    index_topk=8,
    max_position_embeddings=4096,
    compress_rate_csa=4,
    compress_rate_hca=16,
    n_routed_experts=8,
    n_shared_experts=1,
    num_experts_per_tok=2,
    moe_intermediate_size=128,
    num_hash_layers=2,
    hc_mult=4,
)
_TINY_RATIOS = (0, 4, 16, 4, 16, 0)

TINY_CONFIGS: dict[str, ModelConfig] = {
    "tiny-all": ModelConfig(**_TINY_MAIN, compress_ratios=(*_TINY_RATIOS, 0), num_nextn_predict_layers=1),
    "tiny-0731": ModelConfig(
        **_TINY_MAIN,
        compress_ratios=(*_TINY_RATIOS, 0, 0, 0),
        num_nextn_predict_layers=1,  # stale in 0731, as in the release
        dspark=DSparkConfig(block_size=5, noise_token_id=499, target_layer_ids=(3, 4, 5), markov_rank=32, num_stages=3),
    ),
    "flash": ModelConfig(),
}


def get_config(name: str) -> ModelConfig:
    """The named config; ConfigError listing the names when unknown."""
    try:
        return TINY_CONFIGS[name]
    except KeyError:
        raise ConfigError(f"unknown config {name!r}; known: {', '.join(TINY_CONFIGS)}") from None
