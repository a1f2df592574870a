"""transformers' DeepseekV4ForCausalLM as an independent oracle for the reference model.

Builds a random tiny HF model from one of our configs, sets every parameter that HF's default
init leaves at zero/one (sinks, mHC bases/scales, compressor position biases, gate bias,
tid2eid, norm weights) to random non-default values, and maps its state dict onto the release
names our model reads (in memory, fp32, unquantized).
"""

from __future__ import annotations

import torch

from mxserve.config import AttentionKind, ModelConfig


def hf_config_from(cfg: ModelConfig):
    from transformers import DeepseekV4Config

    kind_names = {AttentionKind.SLIDING: "sliding_attention", AttentionKind.CSA: "compressed_sparse_attention",
                  AttentionKind.HCA: "heavily_compressed_attention"}
    scaling = cfg.rope_scaling
    return DeepseekV4Config(
        vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size, num_hidden_layers=cfg.num_hidden_layers,
        num_attention_heads=cfg.num_attention_heads, head_dim=cfg.head_dim, q_lora_rank=cfg.q_lora_rank,
        o_groups=cfg.o_groups, o_lora_rank=cfg.o_lora_rank, sliding_window=cfg.sliding_window,
        index_n_heads=cfg.index_n_heads, index_head_dim=cfg.index_head_dim, index_topk=cfg.index_topk,
        n_routed_experts=cfg.n_routed_experts, num_experts_per_tok=cfg.num_experts_per_tok,
        moe_intermediate_size=cfg.moe_intermediate_size, routed_scaling_factor=cfg.routed_scaling_factor,
        swiglu_limit=cfg.swiglu_limit, hc_mult=cfg.hc_mult, hc_sinkhorn_iters=cfg.hc_sinkhorn_iters, hc_eps=cfg.hc_eps,
        rms_norm_eps=cfg.rms_norm_eps, rope_theta=cfg.rope_theta, compress_rope_theta=cfg.compress_rope_theta,
        partial_rotary_factor=cfg.qk_rope_head_dim / cfg.head_dim,
        layer_types=[kind_names[k] for k in cfg.layer_kinds],
        compress_rates={"compressed_sparse_attention": cfg.compress_rate_csa,
                        "heavily_compressed_attention": cfg.compress_rate_hca},
        mlp_layer_types=["hash_moe" if cfg.is_hash_layer(i) else "moe" for i in range(cfg.num_hidden_layers)],
        rope_parameters=None if scaling is None else {
            "rope_type": "yarn", "factor": scaling.factor,
            "original_max_position_embeddings": scaling.original_max_position_embeddings,
            "beta_fast": scaling.beta_fast, "beta_slow": scaling.beta_slow,
        },
        max_position_embeddings=cfg.max_position_embeddings, tie_word_embeddings=False,
    )


def build_hf_model(cfg: ModelConfig, seed: int):
    """A random fp32 HF model with non-default values everywhere default init leaves 0 or 1."""
    from transformers import DeepseekV4ForCausalLM

    torch.manual_seed(seed)
    model = DeepseekV4ForCausalLM(hf_config_from(cfg)).float().eval()
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, tensor in model.state_dict().items():
            if name.endswith("tid2eid"):
                rows = [torch.randperm(cfg.n_routed_experts, generator=gen)[: cfg.num_experts_per_tok]
                        for _ in range(tensor.shape[0])]
                tensor.copy_(torch.stack(rows))
            elif name.endswith(("sinks", "e_score_correction_bias", "position_bias")) or name.endswith(("hc.base", "hc_head.hc_base")):
                tensor.copy_(torch.randn(tensor.shape, generator=gen) * 0.5)
            elif name.endswith(("hc.scale", "hc_head.hc_scale")):
                tensor.copy_(0.5 + torch.rand(tensor.shape, generator=gen))
            elif name.endswith(("norm.weight", "layernorm.weight")):
                tensor.copy_(1.0 + 0.2 * torch.randn(tensor.shape, generator=gen))
            elif name.endswith(("hc.fn", "hc_head.hc_fn")):
                tensor.copy_(torch.randn(tensor.shape, generator=gen) * 0.05)
    return model


_LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
    "attn_hc.fn": "hc_attn_fn", "attn_hc.base": "hc_attn_base", "attn_hc.scale": "hc_attn_scale",
    "ffn_hc.fn": "hc_ffn_fn", "ffn_hc.base": "hc_ffn_base", "ffn_hc.scale": "hc_ffn_scale",
    "self_attn.sinks": "attn.attn_sink", "self_attn.q_a_proj.weight": "attn.wq_a",
    "self_attn.q_a_norm.weight": "attn.q_norm.weight", "self_attn.q_b_proj.weight": "attn.wq_b",
    "self_attn.kv_proj.weight": "attn.wkv", "self_attn.kv_norm.weight": "attn.kv_norm.weight",
    "self_attn.o_a_proj.weight": "attn.wo_a", "self_attn.o_b_proj.weight": "attn.wo_b",
    "self_attn.compressor.position_bias": "attn.compressor.ape",
    "self_attn.compressor.kv_proj.weight": "attn.compressor.wkv",
    "self_attn.compressor.gate_proj.weight": "attn.compressor.wgate",
    "self_attn.compressor.kv_norm.weight": "attn.compressor.norm.weight",
    "self_attn.compressor.indexer.position_bias": "attn.indexer.compressor.ape",
    "self_attn.compressor.indexer.kv_proj.weight": "attn.indexer.compressor.wkv",
    "self_attn.compressor.indexer.gate_proj.weight": "attn.indexer.compressor.wgate",
    "self_attn.compressor.indexer.kv_norm.weight": "attn.indexer.compressor.norm.weight",
    "self_attn.compressor.indexer.q_b_proj.weight": "attn.indexer.wq_b",
    "self_attn.compressor.indexer.scorer.weights_proj.weight": "attn.indexer.weights_proj",
    "mlp.gate.weight": "ffn.gate.weight", "mlp.gate.tid2eid": "ffn.gate.tid2eid",
    "mlp.gate.e_score_correction_bias": "ffn.gate.bias",
    "mlp.shared_experts.gate_proj.weight": "ffn.shared_experts.w1",
    "mlp.shared_experts.up_proj.weight": "ffn.shared_experts.w3",
    "mlp.shared_experts.down_proj.weight": "ffn.shared_experts.w2",
}
_GLOBAL_NAMES = {
    "model.embed_tokens.weight": "embed.weight", "lm_head.weight": "head.weight", "model.norm.weight": "norm.weight",
    "model.hc_head.hc_fn": "hc_head_fn", "model.hc_head.hc_base": "hc_head_base", "model.hc_head.hc_scale": "hc_head_scale",
}


def hf_to_release_weights(model) -> dict[str, torch.Tensor]:
    """HF state dict → release-named fp32 tensors (linears under their prefix)."""
    out: dict[str, torch.Tensor] = {}
    for name, tensor in model.state_dict().items():
        tensor = tensor.detach().clone()
        if name in _GLOBAL_NAMES:
            out[_GLOBAL_NAMES[name]] = tensor
            continue
        _, _, idx, rest = name.split(".", 3)
        prefix = f"layers.{idx}."
        if rest == "mlp.experts.gate_up_proj":
            inter = tensor.shape[1] // 2
            for e in range(tensor.shape[0]):
                out[f"{prefix}ffn.experts.{e}.w1"] = tensor[e, :inter].contiguous()
                out[f"{prefix}ffn.experts.{e}.w3"] = tensor[e, inter:].contiguous()
        elif rest == "mlp.experts.down_proj":
            for e in range(tensor.shape[0]):
                out[f"{prefix}ffn.experts.{e}.w2"] = tensor[e].contiguous()
        elif rest in _LAYER_NAMES:
            out[prefix + _LAYER_NAMES[rest]] = tensor
        else:
            raise KeyError(f"unmapped HF tensor {name}")
    return out


@torch.no_grad()
def hf_full_logits(model, token_ids: list[int]) -> torch.Tensor:
    """Uncached full forward: fp32 logits [T, V]."""
    ids = torch.tensor([token_ids], dtype=torch.int64)
    return model(input_ids=ids, use_cache=False).logits[0].float()
