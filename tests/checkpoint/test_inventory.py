"""The release inventory against the counts and shapes of dsv4-spec §6 and dsv4-0731 §2."""

from __future__ import annotations

import re

from mxserve.config import ModelConfig
from mxserve.model.checkpoint import ReleaseFormat, build_inventory
from mxserve.testing import TINY_CONFIGS


def _shapes(config: ModelConfig) -> dict[str, tuple[str, tuple[int, ...]]]:
    return {name: (dtype, shape) for name, dtype, shape in build_inventory(config).release_tensors()}


def test_flash_tensor_count_and_spot_shapes():
    shapes = _shapes(TINY_CONFIGS["flash"])
    assert len(shapes) == 69187  # spec §6.1
    assert shapes["layers.0.attn.wq_b.scale"] == ("F8_E8M0", (256, 8))
    assert shapes["layers.0.attn.wo_a.weight"] == ("F8_E4M3", (8192, 4096))
    assert shapes["layers.5.ffn.experts.255.w2.weight"] == ("I8", (4096, 1024))
    assert shapes["layers.5.ffn.experts.255.w2.scale"] == ("F8_E8M0", (4096, 64))
    assert shapes["layers.2.attn.compressor.ape"] == ("F32", (4, 1024))  # CSA
    assert shapes["layers.3.attn.compressor.ape"] == ("F32", (128, 512))  # HCA
    assert shapes["layers.2.attn.indexer.compressor.ape"] == ("F32", (4, 256))
    assert "layers.3.attn.indexer.wq_b.weight" not in shapes
    assert "layers.0.attn.compressor.wkv.weight" not in shapes
    assert shapes["layers.2.ffn.gate.tid2eid"] == ("I64", (129280, 6))
    assert "layers.3.ffn.gate.tid2eid" not in shapes and "layers.2.ffn.gate.bias" not in shapes
    assert shapes["mtp.0.e_proj.scale"] == ("F8_E8M0", (32, 32))
    assert shapes["mtp.0.ffn.gate.bias"] == ("F32", (256,))  # MTP is never hash-routed
    assert "mtp.0.ffn.gate.tid2eid" not in shapes


def test_0731_dspark_inventory_counts():
    flash = TINY_CONFIGS["flash"].to_dict()
    config = ModelConfig.from_dict({
        **flash, "compress_ratios": [*flash["compress_ratios"][:43], 0, 0, 0], "dspark_block_size": 5,
        "dspark_noise_token_id": 128799, "dspark_target_layer_ids": [40, 41, 42], "dspark_markov_rank": 256,
    })
    shapes = _shapes(config)
    assert len(shapes) == 72317  # dsv4-0731 §2.4
    per_stage = [sum(1 for n in shapes if n.startswith(f"mtp.{s}.")) for s in range(3)]
    assert per_stage == [1568, 1565, 1572]
    assert shapes["mtp.0.main_proj.weight"] == ("F8_E4M3", (4096, 12288))
    assert shapes["mtp.0.main_proj.scale"] == ("F8_E8M0", (32, 96))
    assert shapes["mtp.2.confidence_head.proj.weight"][1] == (1, 4352)
    assert "mtp.0.enorm.weight" not in shapes and "mtp.1.hc_head_fn" not in shapes
    assert shapes["mtp.1.ffn.shared_experts.w1.weight"] == ("F8_E4M3", (2048, 4096))  # the draft's shared expert


def test_tiny_all_exercises_every_layer_and_moe_type():
    config = TINY_CONFIGS["tiny-all"]
    inv = build_inventory(config)
    kinds = {k.value for k in config.layer_kinds}
    assert kinds == {"sliding", "csa", "hca"}
    hash_layers = {int(m.group(1)) for n in inv.tensors if (m := re.match(r"layers\.(\d+)\.ffn\.gate\.tid2eid", n))}
    assert hash_layers == {0, 1} and config.compress_ratios[1] == 4  # a hash-routed CSA layer
    assert inv.linears["layers.0.ffn.experts.7.w1"].release_format is ReleaseFormat.MXFP4
    assert inv.linears["layers.1.attn.compressor.wkv"].release_format is ReleaseFormat.BF16
    assert inv.linears["layers.1.attn.wo_a"].logical_shape == (2 * 128, 8 * 512 // 2)
    assert "mtp.0.h_proj" in inv.linears


def test_tiny_0731_targets_main_layers():
    config = TINY_CONFIGS["tiny-0731"]
    assert config.layout.value == "0731" and config.num_mtp_blocks == 0
    inv = build_inventory(config)
    assert inv.linears["mtp.0.main_proj"].in_features == 3 * config.hidden_size
    assert "mtp.2.markov_head.markov_w1.weight" in inv.tensors
    assert "mtp.0.enorm.weight" not in inv.tensors
