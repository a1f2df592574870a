"""The name map between the release layout and transformers' DeepseekV4ForCausalLM, as data.

Facts from transformers 5.24 (`models/deepseek_v4/modeling_deepseek_v4.py` parameter names and
`conversion_mapping.py` key `deepseek_v4`), cross-checked against dsv4-spec §6.7. Release names
inside one decoder block (`layers.{i}.` ↔ `model.layers.{i}.`) map one to one except the routed
experts, which transformers packs per layer: `mlp.experts.gate_up_proj` [E, 2I, H] holds w1's
rows then w3's rows of each expert, `mlp.experts.down_proj` [E, H, I] holds w2.

`save_pretrained` in transformers 5 writes by default the "original format": names reversed
through its conversion mapping, i.e. `model.` + the release name, except for the entries in
`ORIGINAL_FORMAT_GLOBALS` and one reversal quirk (the attention's `kv_norm` comes out as
`attn.norm`). Both spellings are read; the state-dict spelling is written.
"""

from __future__ import annotations

HF_LAYER_PREFIX = "model.layers."  # + "{i}."
RELEASE_LAYER_PREFIX = "layers."  # + "{i}."

GLOBAL_NAMES: dict[str, str] = {
    "embed.weight": "model.embed_tokens.weight",
    "head.weight": "lm_head.weight",
    "norm.weight": "model.norm.weight",
    "hc_head_fn": "model.hc_head.hc_fn",
    "hc_head_base": "model.hc_head.hc_base",
    "hc_head_scale": "model.hc_head.hc_scale",
}

# Release name inside a block -> transformers name inside `model.layers.{i}.`
BLOCK_NAMES: dict[str, str] = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "hc_attn_fn": "attn_hc.fn",
    "hc_attn_base": "attn_hc.base",
    "hc_attn_scale": "attn_hc.scale",
    "hc_ffn_fn": "ffn_hc.fn",
    "hc_ffn_base": "ffn_hc.base",
    "hc_ffn_scale": "ffn_hc.scale",
    "attn.q_norm.weight": "self_attn.q_a_norm.weight",
    "attn.kv_norm.weight": "self_attn.kv_norm.weight",
    "attn.attn_sink": "self_attn.sinks",
    "attn.wq_a.weight": "self_attn.q_a_proj.weight",
    "attn.wq_b.weight": "self_attn.q_b_proj.weight",
    "attn.wkv.weight": "self_attn.kv_proj.weight",
    "attn.wo_a.weight": "self_attn.o_a_proj.weight",
    "attn.wo_b.weight": "self_attn.o_b_proj.weight",
    "attn.compressor.wkv.weight": "self_attn.compressor.kv_proj.weight",
    "attn.compressor.wgate.weight": "self_attn.compressor.gate_proj.weight",
    "attn.compressor.ape": "self_attn.compressor.position_bias",
    "attn.compressor.norm.weight": "self_attn.compressor.kv_norm.weight",
    "attn.indexer.wq_b.weight": "self_attn.compressor.indexer.q_b_proj.weight",
    "attn.indexer.weights_proj.weight": "self_attn.compressor.indexer.scorer.weights_proj.weight",
    "attn.indexer.compressor.wkv.weight": "self_attn.compressor.indexer.kv_proj.weight",
    "attn.indexer.compressor.wgate.weight": "self_attn.compressor.indexer.gate_proj.weight",
    "attn.indexer.compressor.ape": "self_attn.compressor.indexer.position_bias",
    "attn.indexer.compressor.norm.weight": "self_attn.compressor.indexer.kv_norm.weight",
    "ffn.gate.weight": "mlp.gate.weight",
    "ffn.gate.bias": "mlp.gate.e_score_correction_bias",
    "ffn.gate.tid2eid": "mlp.gate.tid2eid",
    "ffn.shared_experts.w1.weight": "mlp.shared_experts.gate_proj.weight",
    "ffn.shared_experts.w2.weight": "mlp.shared_experts.down_proj.weight",
    "ffn.shared_experts.w3.weight": "mlp.shared_experts.up_proj.weight",
}

EXPERTS_GATE_UP = "mlp.experts.gate_up_proj"  # [E, 2I, H]: w1 rows, then w3 rows
EXPERTS_DOWN = "mlp.experts.down_proj"  # [E, H, I]: w2
RELEASE_EXPERT = "ffn.experts.{e}.{w}.weight"  # w in w1, w2, w3

# Default save_pretrained ("original format") spelling -> release name, where it is not
# simply "model." + the release name.
ORIGINAL_FORMAT_GLOBALS: dict[str, str] = {
    "model.embed_tokens.weight": "embed.weight",
    "model.hc_head.hc_fn": "hc_head_fn",
    "model.hc_head.hc_base": "hc_head_base",
    "model.hc_head.hc_scale": "hc_head_scale",
    "model.norm.weight": "norm.weight",
    "head.weight": "head.weight",
    "lm_head.weight": "head.weight",
}
ORIGINAL_FORMAT_BLOCK_FIXUPS: dict[str, str] = {"attn.norm.weight": "attn.kv_norm.weight"}

# transformers' config names for the per-layer schedules.
HF_ATTENTION_TYPES = {"sliding": "sliding_attention", "csa": "compressed_sparse_attention",
                      "hca": "heavily_compressed_attention"}
HF_MLP_HASH, HF_MLP_LEARNED = "hash_moe", "moe"

# Side files copied along by `convert`.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json")
