"""config.json translation between the release spelling and transformers' DeepseekV4Config.

Release → transformers: `compress_ratios` (+ `compress_rate_csa/hca`) becomes `layer_types` +
`compress_rates`; `num_hash_layers` becomes `mlp_layer_types`; `rope_theta`,
`compress_rope_theta` and `rope_scaling` become `rope_parameters` {main, compress} with YaRN's
`attention_factor` pinned to 1.0 (no mscale); `qk_rope_head_dim` also as
`partial_rotary_factor`. `quantization_config` is dropped (the transformers layout is written in
full precision); keys transformers does not know (`topk_method`, `expert_dtype`, `dspark_*`) are
carried along untouched. The reverse reads both the modern keys and the legacy ones
transformers folds in (`compress_ratios`, `num_hash_layers`, `qk_rope_head_dim`).
"""

from __future__ import annotations

from typing import Any

from mxserve.config import ConfigError, ModelConfig, QuantizationConfig
from mxserve.model.checkpoint.hf_names import HF_ATTENTION_TYPES, HF_MLP_HASH, HF_MLP_LEARNED

_SHARED_KEYS = (
    "vocab_size", "hidden_size", "moe_intermediate_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "head_dim", "q_lora_rank", "num_experts_per_tok", "n_routed_experts",
    "n_shared_experts", "scoring_func", "norm_topk_prob", "routed_scaling_factor", "max_position_embeddings",
    "hc_mult", "hc_sinkhorn_iters", "hc_eps", "swiglu_limit", "sliding_window", "o_groups", "o_lora_rank",
    "index_n_heads", "index_head_dim", "index_topk", "num_nextn_predict_layers", "hidden_act", "rms_norm_eps",
    "bos_token_id", "eos_token_id", "tie_word_embeddings",
)
_CARRIED_KEYS = ("topk_method", "expert_dtype")
_HF_ONLY_KEYS = {
    "architectures", "model_type", "layer_types", "compress_rates", "mlp_layer_types", "rope_parameters",
    "partial_rotary_factor", "qk_rope_head_dim", "rope_theta", "compress_rope_theta", "dtype", "torch_dtype",
    "transformers_version", "attention_bias", "attention_dropout", "mlp_bias", "use_cache", "pad_token_id",
    "output_router_logits", "router_aux_loss_coef", "router_jitter_noise", "initializer_range",
    "compress_ratios", "compress_rate_csa", "compress_rate_hca", "num_hash_layers", "rope_scaling",
    "quantization_config",
}


def release_to_hf_config(config: ModelConfig, dtype: str = "bfloat16") -> dict[str, Any]:
    """The transformers config.json dict for `config` (main model; MTP/DSpark keys carried)."""
    n = config.num_hidden_layers
    out: dict[str, Any] = {"architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4"}
    for key in _SHARED_KEYS:
        out[key] = getattr(config, key)
    out["layer_types"] = [HF_ATTENTION_TYPES[k.value] for k in config.layer_kinds]
    out["compress_rates"] = {HF_ATTENTION_TYPES["csa"]: config.compress_rate_csa,
                             HF_ATTENTION_TYPES["hca"]: config.compress_rate_hca}
    out["mlp_layer_types"] = [HF_MLP_HASH if config.is_hash_layer(i) else HF_MLP_LEARNED for i in range(n)]
    factor = config.qk_rope_head_dim / config.head_dim
    out["partial_rotary_factor"] = factor
    out["rope_theta"] = config.rope_theta
    out["compress_rope_theta"] = config.compress_rope_theta
    compress: dict[str, Any] = {"rope_type": "default", "rope_theta": config.compress_rope_theta,
                                "partial_rotary_factor": factor}
    if config.rope_scaling is not None:
        y = config.rope_scaling
        compress.update(rope_type="yarn", factor=y.factor,
                        original_max_position_embeddings=y.original_max_position_embeddings,
                        beta_fast=y.beta_fast, beta_slow=y.beta_slow, attention_factor=1.0)
    out["rope_parameters"] = {
        "main": {"rope_type": "default", "rope_theta": config.rope_theta, "partial_rotary_factor": factor},
        "compress": compress,
    }
    out["dtype"] = dtype
    for key in _CARRIED_KEYS:
        out[key] = getattr(config, key)
    # MTP / DSpark ratios beyond the main layers (transformers builds no MTP block).
    out["mxserve_mtp_compress_ratios"] = list(config.compress_ratios[n:])
    if config.dspark is not None:
        d = config.dspark
        out.update(dspark_block_size=d.block_size, dspark_noise_token_id=d.noise_token_id,
                   dspark_target_layer_ids=list(d.target_layer_ids), dspark_markov_rank=d.markov_rank)
    for key, value in config.extra.items():
        out.setdefault(key, value)
    return out


def hf_to_release_config(hf: dict[str, Any], *, quantized: bool, num_mtp_layers: int | None) -> ModelConfig:
    """The release ModelConfig for a transformers config.json dict.

    `quantized`: whether the release checkpoint carries `quantization_config`.
    `num_mtp_layers`: how many MTP/DSpark blocks the weights hold (0 → the config gets none).
    """
    if hf.get("model_type", "deepseek_v4") != "deepseek_v4":
        raise ConfigError(f"config.json: model_type={hf.get('model_type')!r} is not 'deepseek_v4'")
    raw: dict[str, Any] = {k: hf[k] for k in _SHARED_KEYS if k in hf}
    n = hf.get("num_hidden_layers", 43)
    rates = dict(hf.get("compress_rates") or {})
    csa = int(hf.get("compress_rate_csa", rates.get(HF_ATTENTION_TYPES["csa"], 4)))
    hca = int(hf.get("compress_rate_hca", rates.get(HF_ATTENTION_TYPES["hca"], 128)))
    ratio_of = {HF_ATTENTION_TYPES["sliding"]: 0, HF_ATTENTION_TYPES["csa"]: csa, HF_ATTENTION_TYPES["hca"]: hca}
    if hf.get("layer_types") is not None:
        try:
            ratios = [ratio_of[t] for t in hf["layer_types"][:n]]
        except KeyError as exc:
            raise ConfigError(f"config.json: layer_types contains unknown type {exc.args[0]!r}") from None
    elif hf.get("compress_ratios") is not None:
        ratios = list(hf["compress_ratios"][:n])
    else:
        raise ConfigError("config.json: neither layer_types nor compress_ratios is present")
    if len(ratios) != n:
        raise ConfigError(f"config.json: layer_types has {len(ratios)} entries for num_hidden_layers={n}")
    mlp_types = hf.get("mlp_layer_types")
    if mlp_types is not None:
        num_hash = sum(1 for t in mlp_types if t == HF_MLP_HASH)
        if list(mlp_types[:num_hash]) != [HF_MLP_HASH] * num_hash or any(
            t not in (HF_MLP_HASH, HF_MLP_LEARNED) for t in mlp_types
        ):
            raise ConfigError(f"config.json: mlp_layer_types={mlp_types} is not hash_moe layers followed by moe layers")
    else:
        num_hash = int(hf.get("num_hash_layers", 3))
    raw["num_hash_layers"] = num_hash
    raw["compress_rate_csa"], raw["compress_rate_hca"] = csa, hca
    head_dim = hf.get("head_dim", 512)
    if "qk_rope_head_dim" in hf:
        raw["qk_rope_head_dim"] = int(hf["qk_rope_head_dim"])
    elif hf.get("partial_rotary_factor") is not None:
        raw["qk_rope_head_dim"] = round(hf["partial_rotary_factor"] * head_dim)
    rope = hf.get("rope_parameters") or {}
    main, compress = rope.get("main") or {}, rope.get("compress") or {}
    raw["rope_theta"] = main.get("rope_theta", hf.get("rope_theta", 10000.0))
    raw["compress_rope_theta"] = compress.get("rope_theta", hf.get("compress_rope_theta", 160000.0))
    if compress.get("rope_type", compress.get("type")) == "yarn":
        raw["rope_scaling"] = {k: compress[k] for k in
                               ("factor", "original_max_position_embeddings", "beta_fast", "beta_slow") if k in compress}
        raw["rope_scaling"]["type"] = "yarn"
    elif isinstance(hf.get("rope_scaling"), dict):
        raw["rope_scaling"] = hf["rope_scaling"]
    else:
        raw["rope_scaling"] = None
    for key in _CARRIED_KEYS:
        if key in hf:
            raw[key] = hf[key]
    dspark = {k: v for k, v in hf.items() if k.startswith("dspark_")}
    tail = list(hf.get("mxserve_mtp_compress_ratios") or [])
    num_mtp = int(num_mtp_layers or 0)
    if dspark and num_mtp:
        raw.update(dspark)
        tail = (tail + [0] * num_mtp)[:num_mtp]
    else:
        raw["num_nextn_predict_layers"] = num_mtp
        tail = (tail + [0] * num_mtp)[:num_mtp]
    raw["compress_ratios"] = ratios + tail
    if quantized:
        raw["quantization_config"] = QuantizationConfig().to_dict()
    for key, value in hf.items():  # unknown keys survive the trip
        if key not in raw and key not in _HF_ONLY_KEYS and key not in _SHARED_KEYS and not key.startswith(
            ("dspark_", "mxserve_")
        ):
            raw[key] = value
    try:
        return ModelConfig.from_dict(raw)
    except TypeError as exc:
        raise ConfigError(f"config.json: {exc}") from None
