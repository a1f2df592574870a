"""The sharding plan and shard slicing, without processes: which slice each rank holds, the clear
errors for configs that cannot split on whole 128-blocks, per-rank bytes, and exact slices."""

from __future__ import annotations

import dataclasses
import itertools

import pytest
import torch

from mxserve import default_model_path
from mxserve.config import ModelConfig
from mxserve.distributed import ParallelConfig, Shard, ShardingError, ShardingPlan
from mxserve.distributed.shards import load_rank_weights, planned_rank_nbytes, slice_weight, weight_nbytes
from mxserve.formats import QuantizedWeight
from mxserve.formats.quantized_weight import WeightLayout
from mxserve.model.checkpoint import CheckpointReader, build_inventory
from mxserve.testing.tiny_configs import get_config


def default_config() -> ModelConfig:
    return ModelConfig.from_file(default_model_path() / "config.json")


@pytest.mark.parametrize("n, ep", [(1, False), (2, False), (4, False), (2, True), (4, True)])
def test_default_model_splits(n, ep):
    plan = ShardingPlan.build(default_config(), ParallelConfig(n, ep))
    c = default_config()
    assert plan.heads_per_rank * n == c.num_attention_heads
    rank_config = plan.rank_config()
    assert rank_config.num_attention_heads == c.num_attention_heads // n
    # every split weight is tiled exactly by the ranks' shards, on 128 boundaries
    for name, extent in (("layers.0.attn.wq_b", c.num_attention_heads * c.head_dim), ("embed.weight", c.vocab_size)):
        spans = sorted(plan.shard(name, r).rows for r in range(n))
        assert spans[0][0] == 0 and spans[-1][1] == extent
        assert all(a[1] == b[0] for a, b in itertools.pairwise(spans))
    if n == 4:  # 2 wo_a groups over 4 ranks: each rank holds its head's columns of its group
        assert plan.ranks_per_group == 2
        assert plan.shard("layers.0.attn.wo_a", 3) == Shard(rows=(128, 256), cols=(512, 1024))
        assert plan.shard("layers.0.attn.wo_b", 3) == Shard(rows=(128, 256), cols=(128, 256))
    if ep:
        owners = [r for e in range(c.n_routed_experts) for r in range(n)
                  if plan.shard(f"layers.3.ffn.experts.{e}.w1", r) is not None]
        assert owners == sorted(owners) and len(owners) == c.n_routed_experts  # each expert on exactly one rank


@pytest.mark.parametrize("config, n, ep, words", [
    (default_config(), 3, False, "num_attention_heads=4 is not divisible by 3"),
    (default_config(), 8, False, "num_attention_heads=4 is not divisible by 8"),
    (dataclasses.replace(get_config("tiny-all"), num_attention_heads=12, o_groups=3), 2, False, "o_groups=3"),
    (dataclasses.replace(get_config("tiny-all"), n_routed_experts=6), 4, True, "n_routed_experts=6"),
    (dataclasses.replace(get_config("tiny-all"), vocab_size=510), 4, False, "vocab_size=510"),
    (get_config("tiny-all"), 8, False, "hidden_size=256 over the 4 ranks sharing a wo_a group"),
])
def test_configs_that_cannot_split_raise_a_clear_error(config, n, ep, words):
    with pytest.raises(ShardingError, match=words.replace("(", r"\(")):
        ShardingPlan.build(config, ParallelConfig(n, ep))


def test_experts_that_cannot_split_on_128_blocks_are_token_split():
    # moe_intermediate_size=256 has two 128-blocks: over 4 ranks, 2 shards each held by 2 ranks
    plan = ShardingPlan.build(default_config(), ParallelConfig(4))
    assert (plan.moe_tp, plan.moe_replicas) == (2, 2)
    assert [plan.moe_shard(r) for r in range(4)] == [(0, 0), (1, 0), (0, 1), (1, 1)]
    assert plan.shard("layers.0.ffn.experts.5.w2", 1) == Shard(cols=(128, 256))
    tiny = ShardingPlan.build(get_config("tiny-all"), ParallelConfig(2))  # 128: one block, replicated
    assert (tiny.moe_tp, tiny.moe_replicas) == (1, 2)


def test_flash_rank_bytes_are_about_one_nth():
    config = get_config("flash")
    inventory = build_inventory(config)
    total = planned_rank_nbytes(inventory, ShardingPlan.build(config, ParallelConfig(1)), 0)
    for n, ep in ((2, False), (8, False), (8, True)):
        plan = ShardingPlan.build(config, ParallelConfig(n, ep))
        shares = [planned_rank_nbytes(inventory, plan, r) / total for r in (0, n - 1)]  # ranks are symmetric
        assert max(shares) < 1.06 / n, shares  # measured 0.504 (TP=2), 0.132 (TP=8): replicated parts < 1 %


def _quantized(layout: WeightLayout, shape: tuple[int, int], seed: int) -> QuantizedWeight:
    return QuantizedWeight.quantize(torch.randn(shape, generator=torch.Generator().manual_seed(seed)), layout)


@pytest.mark.parametrize("layout", [WeightLayout.FP8_BLOCK, WeightLayout.MXFP4])
@pytest.mark.parametrize("shard", [Shard(rows=(128, 256)), Shard(cols=(256, 384)), Shard(rows=(0, 128), cols=(128, 200))])
def test_slices_decode_to_the_full_weights_slice(layout, shard):
    w = _quantized(layout, (320, 200 if shard.cols == (128, 200) else 384), seed=3)
    full = w.dequantize()
    r0, r1 = shard.rows or (0, full.shape[0])
    c0, c1 = shard.cols or (0, full.shape[1])
    part = slice_weight(w, shard)
    assert part.shape == (r1 - r0, c1 - c0)
    assert torch.equal(part.dequantize(), full[r0:r1, c0:c1])


def test_a_slice_inside_a_scale_block_is_refused():
    with pytest.raises(ValueError, match="does not sit on 128-wide scale blocks"):
        slice_weight(_quantized(WeightLayout.FP8_BLOCK, (256, 256), 0), Shard(rows=(64, 192)))
    with pytest.raises(ValueError, match="does not sit on 32-wide scale blocks"):
        slice_weight(_quantized(WeightLayout.MXFP4, (64, 256), 0), Shard(cols=(16, 48)))


def test_rank_weights_are_the_planned_shards_of_the_checkpoint():
    reader = CheckpointReader(default_model_path())
    full = reader.load(progress=False, verify_manifest=False)
    plan = ShardingPlan.build(reader.config, ParallelConfig(4, True))
    total = weight_nbytes({k: v for k, v in full.items() if not k.startswith("mtp.")})
    for rank in (0, 3):
        weights = load_rank_weights(reader, plan, rank)
        assert weight_nbytes(weights) == planned_rank_nbytes(reader.inventory, plan, rank) < total
        wo_a, shard = weights["layers.2.attn.wo_a"], plan.shard("layers.2.attn.wo_a", rank)
        assert torch.equal(wo_a.dequantize(), full["layers.2.attn.wo_a"].dequantize()[
            shard.rows[0] : shard.rows[1], shard.cols[0] : shard.cols[1]])
        owned = [e for e in range(8) if weights[f"layers.4.ffn.experts.{e}.w1"].shape[0]]
        assert owned == [2 * rank, 2 * rank + 1]
