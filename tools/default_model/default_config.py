"""The default model's architecture (issue 5 item 3), as a release-spelled `ModelConfig`.

Every DeepSeek-V4 feature is on, at the smallest widths the release formats allow:
* head_dim 512 (448 NoPE + 64 RoPE) so the real `fp8_ds_mla` cache entry applies;
* mHC with 4 streams; o_groups 2 (grouped output projection); the attention sink (always there);
* 8 layers: 2 sliding-only, 3 CSA (ratio 4, indexer top-64: 256 candidates at 1024 tokens, so the
  indexer really selects), 3 HCA (ratio 128, as in the release);
* MoE everywhere: 8 routed experts, top-2, one shared expert; the first 3 layers hash-routed
  (as in the release, one of them a CSA layer), the rest learned (sqrtsoftplus + bias);
* sliding window 128 and YaRN on the compressed layers like the release; positions up to 4096.
hidden 256 and vocab 4096 keep every dense dimension a multiple of the 128x128 FP8 block and the
packed release checkpoint at ~27 MB (see `checkpoint_bytes`).

No MTP block: transformers' DeepseekV4ForCausalLM (the trainer) builds none.
"""

from __future__ import annotations

import math

from mxserve.config import ModelConfig

VOCAB_SIZE = 4096  # tokenizer entries, special tokens included (train_tokenizer.py)
TRAIN_CONTEXT = 1024  # tokens per training sequence


def default_model_config() -> ModelConfig:
    return ModelConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=256,
        num_hidden_layers=8,
        num_attention_heads=4,
        head_dim=512,
        qk_rope_head_dim=64,
        q_lora_rank=128,
        o_groups=2,
        o_lora_rank=128,
        sliding_window=128,
        index_n_heads=8,
        index_head_dim=128,
        index_topk=64,
        max_position_embeddings=4096,
        compress_ratios=(0, 0, 4, 128, 4, 128, 4, 128),
        compress_rate_csa=4,
        compress_rate_hca=128,
        n_routed_experts=8,
        n_shared_experts=1,
        num_experts_per_tok=2,
        moe_intermediate_size=256,
        num_hash_layers=3,
        hc_mult=4,
        num_nextn_predict_layers=0,
    )


_DTYPE_BYTES = {"F8_E4M3": 1, "F8_E8M0": 1, "I8": 1, "BF16": 2, "F32": 4, "I64": 8}


def checkpoint_bytes(config: ModelConfig) -> dict[str, int]:
    """Bytes of the packed release checkpoint by stored dtype (tensor data only)."""
    from mxserve.model.checkpoint import build_inventory

    out: dict[str, int] = {}
    for _name, dtype, shape in build_inventory(config).release_tensors():
        out[dtype] = out.get(dtype, 0) + _DTYPE_BYTES[dtype] * math.prod(shape)
    return out


if __name__ == "__main__":
    by_dtype = checkpoint_bytes(default_model_config())
    for dtype, n in sorted(by_dtype.items()):
        print(f"{dtype:8s} {n / 1e6:7.2f} MB")
    print(f"total    {sum(by_dtype.values()) / 1e6:7.2f} MB")
