"""benchmarks/tp_flash.py (issue 15's full-size TP run) on the CPU: a tiny-all checkpoint written by the
script, run at TP=2 over gloo and in one process; the JSON carries every field the H200 run reports,
and the greedy tokens of every scenario equal one process's (exact numerics). Also its refusals
(exit 2, one line) and the size arithmetic the pre-flight relies on at Flash size."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

from mxserve.distributed import ParallelConfig, ShardingPlan
from mxserve.distributed.shards import planned_rank_nbytes
from mxserve.model.checkpoint import build_inventory
from mxserve.testing.tiny_configs import get_config

_SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "tp_flash.py"


def _load_script():
    spec = importlib.util.spec_from_file_location("tp_flash", _SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the script runs
    spec.loader.exec_module(module)
    return module


tp_flash = _load_script()


def _options(ckpt: Path, out: Path, tp: int):
    return tp_flash.Options(ckpt_dir=ckpt, config="tiny-all", tp=tp, device="cpu", numerics="exact", kernels=None,
                            context=40, batches=(1, 3), prefill_tokens=48, decode_steps=3, warmup_steps=1, out=out)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[dict, dict, Path]:
    root = tmp_path_factory.mktemp("tp_flash")
    ckpt = root / "ckpt"
    tp2 = tp_flash.run(_options(ckpt, root / "tp2.json", 2), echo=lambda _: None)
    tp1 = tp_flash.run(_options(ckpt, root / "tp1.json", 1), echo=lambda _: None)  # reuses the checkpoint
    return tp2, tp1, root


def test_tp2_json_has_every_field_and_tokens_equal_one_process(runs):
    tp2, tp1, root = runs
    on_disk = json.loads((root / "tp2.json").read_text())
    assert on_disk["meta"]["env"] == tp_flash.NO_MULTICAST_ENV  # what the spawned ranks inherited
    assert on_disk["checkpoint"]["reused"] is False and on_disk["checkpoint"]["write_s"] > 0
    assert tp1["checkpoint"]["reused"] is True
    assert on_disk["load"]["load_s"] > 0
    ranks = on_disk["load"]["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1]
    assert [r["weight_bytes"] for r in ranks] == on_disk["sizes"]["rank_weight_bytes"]  # the plan's shards
    assert all(r["resident_bytes"] > 0 for r in ranks)
    kv = on_disk["kv_cache"]
    assert kv["capacity_tokens"] > 0 and f"{kv['capacity_tokens']} tokens fit" in kv["startup_line"]
    names = [row["name"] for row in on_disk["scenarios"]]
    assert names == ["prefill 48 (cold: compiles)", "prefill 48", "decode b1 ctx40", "decode b3 ctx40"]
    for row in on_disk["scenarios"]:
        assert "error" not in row, row
        assert row["tok_s"] > 0 and row["time_s"] > 0
    for row in (r for r in on_disk["scenarios"] if r["phase"] == "decode"):
        assert row["steps"] == 3 and row["steps_not_full_batch"] == 0
        assert len(row["token_ids"]) == row["batch"] and all(len(t) >= 1 + 1 + 3 for t in row["token_ids"])
    assert on_disk["graph_decode"]["used"] is False and "not under TP" in on_disk["graph_decode"]["reason"]
    assert "error" in on_disk["comparison"]["single_gpu_projection"]  # no --layers-json given
    assert set(on_disk["comparison"]["tp_over_anchor"]) == {"1"}  # JSON keys; batch 8/64 not run here

    # Exact numerics: TP=2 generates exactly what one process generates, scenario by scenario.
    for ours, ref in zip(tp2["scenarios"], tp1["scenarios"], strict=True):
        assert ours["name"] == ref["name"]
        assert ours["token_ids"] == ref["token_ids"], ours["name"]


def test_checkpoint_size_estimate_matches_what_was_written(runs):
    _, _, root = runs
    written = sum(f.stat().st_size for f in (root / "ckpt").glob("*.safetensors"))
    estimate = tp_flash.checkpoint_nbytes(get_config("tiny-all"))
    assert estimate <= written <= estimate * tp_flash.DISK_MARGIN  # headers are the only extra


def test_refuses_with_too_few_gpus(tmp_path, capsys):
    if torch.cuda.device_count() >= 2:
        pytest.skip("this machine has 2 GPUs")
    code = tp_flash.main(["--ckpt-dir", str(tmp_path / "ck"), "--tp", "2", "--device", "cuda",
                          "--out", str(tmp_path / "o.json")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err[-1] == f"refused: --tp 2 needs 2 GPUs; torch sees {torch.cuda.device_count()}"
    assert not (tmp_path / "ck").exists()


def test_refuses_when_the_disk_is_too_small(tmp_path, capsys, monkeypatch):
    class _Usage:
        free = 10**9

    monkeypatch.setattr(tp_flash.shutil, "disk_usage", lambda _path: _Usage())
    code = tp_flash.main(["--ckpt-dir", str(tmp_path / "ck"), "--tp", "2", "--device", "cpu",
                          "--kernels", "none", "--out", str(tmp_path / "o.json")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    needed = tp_flash.checkpoint_nbytes(get_config("flash")) * tp_flash.DISK_MARGIN / 1e9
    assert err[-1].startswith(f"refused: the flash checkpoint needs {needed:.1f} GB at ")
    assert err[-1].endswith("has 1.0 GB free")
    assert not (tmp_path / "ck").exists()


def test_flash_tp2_shards_plus_triton_stacked_experts_exceed_one_h200():
    """Why the H200 run uses moe=reference: the Triton MoE stacks a copy of each layer's experts on
    first use, and at TP=2 a rank's shards (78.7 GB) plus that copy do not fit 143771 MiB."""
    config = get_config("flash")
    plan = ShardingPlan.build(config, ParallelConfig(2))
    experts = tp_flash.routed_expert_nbytes(config, plan, 0)
    # 43 layers x 256 experts x 3 matrices, half of each (TP=2), MXFP4 codes + one scale byte per 32
    per_matrix = config.moe_intermediate_size * config.hidden_size
    assert experts == config.num_hidden_layers * config.n_routed_experts * 3 * (per_matrix // 2 + per_matrix // 32) // 2
    shards = planned_rank_nbytes(build_inventory(config), plan, 0)
    assert shards + experts > 143771 * 2**20
    assert shards < 143771 * 2**20 / 1.5  # the shards alone leave room for caches
