"""Reading and writing release checkpoints: packed loading, sharding, manifests, full precision."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from mxserve.formats import QuantizedWeight, dequantize_fp8_block, dequantize_mxfp4
from mxserve.model.checkpoint import (
    MANIFEST_NAME,
    CheckpointError,
    CheckpointReader,
    convert_checkpoint,
    to_release,
)
from mxserve.model.checkpoint.files import SafetensorsDir
from mxserve.testing import TINY_CONFIGS, random_checkpoint
from mxserve.testing.random_checkpoint import _Pools, random_linear
from tests.checkpoint.helpers import rewrite


def test_load_keeps_quantized_weights_packed(tiny_all: Path):
    reader = CheckpointReader(tiny_all)
    weights = reader.load(progress=False)
    assert len(weights) == len(reader.inventory.linears) + len(reader.inventory.tensors)
    wq_a = weights["layers.0.attn.wq_a"]
    expert = weights["layers.2.ffn.experts.3.w2"]
    assert isinstance(wq_a, QuantizedWeight) and wq_a.codes.dtype == torch.uint8
    assert wq_a.shape == (128, 256) and tuple(wq_a.scales.shape) == (1, 2)
    assert isinstance(expert, QuantizedWeight) and tuple(expert.codes.shape) == (256, 64)
    assert tuple(expert.scales.shape) == (256, 4)
    files = SafetensorsDir(tiny_all)
    # Bytes are the file's bytes (reinterpreted, never numerically cast).
    assert torch.equal(wq_a.scales, files.raw("layers.0.attn.wq_a.scale").view(torch.uint8))
    assert torch.equal(
        wq_a.dequantize(torch.float32),
        dequantize_fp8_block(files.raw("layers.0.attn.wq_a.weight"), files.raw("layers.0.attn.wq_a.scale")),
    )
    assert torch.equal(
        expert.dequantize(torch.float32),
        dequantize_mxfp4(files.raw("layers.2.ffn.experts.3.w2.weight"), files.raw("layers.2.ffn.experts.3.w2.scale")),
    )
    assert weights["layers.1.attn.compressor.wkv"].dtype == torch.bfloat16
    assert weights["layers.0.ffn.gate.tid2eid"].dtype == torch.int64
    assert reader.manifest_status.startswith("verified")


def test_random_weights_have_realistic_values(tiny_all: Path):
    reader = CheckpointReader(tiny_all)
    config = reader.config
    tid2eid = reader.load_tensor("layers.0.ffn.gate.tid2eid")
    assert int(tid2eid.min()) >= 0 and int(tid2eid.max()) < config.n_routed_experts
    assert all(len(set(row.tolist())) == config.num_experts_per_tok for row in tid2eid)  # distinct experts
    for name in ("layers.0.attn.attn_sink", "layers.2.hc_attn_base", "layers.2.ffn.gate.bias",
                 "layers.1.attn.compressor.ape", "hc_head_base"):
        assert reader.load_tensor(name).abs().min() > 0 or reader.load_tensor(name).abs().mean() > 1e-3, name
    norm = reader.load_tensor("layers.0.attn_norm.weight").float()
    assert 0.8 < float(norm.mean()) < 1.2
    assert bool((reader.load_tensor("layers.0.hc_attn_scale") > 0).all())
    w = reader.load_linear("layers.0.attn.wq_a").dequantize(torch.float32)
    assert 0.5 / 16 < float(w.std()) < 2 / 16  # std 1/sqrt(in=256)
    spec = reader.inventory.linears["layers.0.ffn.experts.1.w2"]
    exact = random_linear(spec, seed=1, pools=_Pools(1), exact=True)
    pooled = random_linear(spec, seed=1, pools=_Pools(1))
    for w in (exact.dequantize(torch.float32), pooled.dequantize(torch.float32)):
        assert 0.5 / 11.3 < float(w.std()) < 2 / 11.3  # std 1/sqrt(in=128)
    assert torch.equal(pooled.codes, reader.load_linear("layers.0.ffn.experts.1.w2").codes)


def test_random_checkpoint_is_deterministic_and_seeded(tmp_path: Path, tiny_all: Path):
    again = random_checkpoint("tiny-all", tmp_path / "again", seed=1, progress=False)
    files = lambda p: json.loads((p / MANIFEST_NAME).read_text())["files"]  # noqa: E731
    assert files(again) == files(tiny_all)  # same seed, same bytes
    spec = CheckpointReader(tiny_all).inventory.linears["layers.0.attn.wq_b"]
    a, b = random_linear(spec, 1, _Pools(1)), random_linear(spec, 2, _Pools(2))
    assert not torch.equal(a.codes, b.codes)


def test_sharded_write_validates_and_indexes_every_tensor(tmp_path: Path):
    path = random_checkpoint("tiny-0731", tmp_path / "sharded", seed=3, max_shard_bytes=2_000_000, progress=False)
    index = json.loads((path / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) > 3 and shards[0] == f"model-00001-of-{len(shards):05d}.safetensors"
    manifest = json.loads((path / MANIFEST_NAME).read_text())
    assert set(shards) <= set(manifest["files"]) and manifest["mxserve_version"]
    reader = CheckpointReader(path)
    reader.validate()
    assert reader.num_tensors == reader.inventory.num_release_tensors() == len(index["weight_map"])


def test_full_precision_checkpoint_is_accepted_and_exact(tmp_path: Path, tiny_all: Path):
    full = convert_checkpoint(tiny_all, tmp_path / "full", to="release", quantize=False, progress=False)
    reader = CheckpointReader(full)
    reader.validate()
    assert not any(n.endswith(".scale") for n in reader.tensor_names)
    packed = CheckpointReader(tiny_all)
    for prefix in ("layers.0.attn.wq_b", "layers.3.ffn.experts.5.w1", "mtp.0.e_proj"):
        w = reader.load_linear(prefix)
        assert isinstance(w, torch.Tensor) and w.dtype == torch.bfloat16
        assert torch.equal(w.float(), packed.load_linear(prefix).dequantize(torch.float32))
    # ... and re-quantizing it gives back the same values (bytes may differ: a block whose
    # quantized amax lands exactly on a binade edge gets the next smaller scale).
    for prefix in ("layers.0.attn.wq_b", "layers.3.ffn.experts.5.w1"):
        again = to_release(reader.load_linear(prefix), reader.inventory.linears[prefix])
        assert torch.equal(again.dequantize(torch.float32), packed.load_linear(prefix).dequantize(torch.float32))


def test_f32_scales_are_accepted_as_exact_ue8m0(tmp_path: Path, tiny_all: Path):
    name = "layers.0.attn.wq_a.scale"

    def to_f32(t: dict[str, torch.Tensor]) -> None:
        t[name] = torch.exp2(t[name].view(torch.uint8).float() - 127)

    path = rewrite(tiny_all, tmp_path / "f32scale", to_f32)
    reader = CheckpointReader(path)
    reader.validate()
    assert torch.equal(reader.load_linear("layers.0.attn.wq_a").scales,
                       CheckpointReader(tiny_all).load_linear("layers.0.attn.wq_a").scales)


def test_extreme_e8m0_bytes_survive_unchanged(tmp_path: Path, tiny_all: Path):
    # Byte 0 is 2^-127: a numeric cast to float8/uint8 would turn it into 0.
    name = "layers.0.attn.wkv.scale"

    def set_zero(t: dict[str, torch.Tensor]) -> None:
        t[name] = torch.zeros_like(t[name].view(torch.uint8)).view(torch.float8_e8m0fnu)

    reader = CheckpointReader(rewrite(tiny_all, tmp_path / "tiny_scale", set_zero))
    assert int(reader.load_linear("layers.0.attn.wkv").scales.max()) == 0


def test_writer_refuses_duplicates_and_convert_refuses_a_full_destination(tmp_path: Path, tiny_all: Path):
    from mxserve.model.checkpoint import CheckpointWriter

    writer = CheckpointWriter(tmp_path / "dup", {"model_type": "deepseek_v4"})
    writer.add_tensor("a", torch.zeros(2))
    with pytest.raises(CheckpointError, match="written twice"):
        writer.add_tensor("a", torch.zeros(2))
    with pytest.raises(CheckpointError, match="already holds a checkpoint"):
        convert_checkpoint(tiny_all, tiny_all, to="release", progress=False)


def test_configs_round_trip_through_config_json():
    for config in TINY_CONFIGS.values():
        from mxserve.config import ModelConfig

        assert ModelConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config
