"""transformers' DeepseekV4ForCausalLM as an independent oracle for the reference model.

Builds a random tiny HF model from one of our configs, sets every parameter that HF's default
init leaves at zero/one (sinks, mHC bases/scales, compressor position biases, gate bias,
tid2eid, norm weights) to random non-default values, and maps its state dict onto the release
names our model reads (in memory, fp32, unquantized).
"""

from __future__ import annotations

import torch

from mxserve.config import ModelConfig
from mxserve.model.checkpoint.hf_config import release_to_hf_config
from mxserve.model.checkpoint.hf_names import (
    BLOCK_NAMES,
    EXPERTS_DOWN,
    EXPERTS_GATE_UP,
    GLOBAL_NAMES,
    HF_LAYER_PREFIX,
    RELEASE_EXPERT,
)


def hf_config_from(cfg: ModelConfig):
    from transformers import DeepseekV4Config

    return DeepseekV4Config(**release_to_hf_config(cfg, dtype="float32"))


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


def hf_to_release_weights(model) -> dict[str, torch.Tensor]:
    """HF state dict → release-named fp32 tensors, through the checkpoint layer's name map."""
    to_release_block = {hf: release for release, hf in BLOCK_NAMES.items()}
    to_release_global = {hf: release for release, hf in GLOBAL_NAMES.items()}
    out: dict[str, torch.Tensor] = {}
    for name, tensor in model.state_dict().items():
        tensor = tensor.detach().clone()
        if name in to_release_global:
            out[to_release_global[name]] = tensor
            continue
        idx, rest = name.removeprefix(HF_LAYER_PREFIX).split(".", 1)
        prefix = f"layers.{idx}."
        if rest == EXPERTS_GATE_UP:
            inter = tensor.shape[1] // 2
            for e in range(tensor.shape[0]):
                out[prefix + RELEASE_EXPERT.format(e=e, w="w1")] = tensor[e, :inter].contiguous()
                out[prefix + RELEASE_EXPERT.format(e=e, w="w3")] = tensor[e, inter:].contiguous()
        elif rest == EXPERTS_DOWN:
            for e in range(tensor.shape[0]):
                out[prefix + RELEASE_EXPERT.format(e=e, w="w2")] = tensor[e].contiguous()
        else:
            out[prefix + to_release_block[rest]] = tensor
    return out


@torch.no_grad()
def hf_full_logits(model, token_ids: list[int]) -> torch.Tensor:
    """Uncached full forward: fp32 logits [T, V]."""
    ids = torch.tensor([token_ids], dtype=torch.int64)
    return model(input_ids=ids, use_cache=False).logits[0].float()
