"""tools/dspark/ship_draft.py, the step that puts a trained draft into the packaged default model:
it keeps the target shards byte for byte, replaces the draft shard, and refuses a trained
checkpoint whose target tensors or non-draft config differ from the packaged ones."""

from __future__ import annotations

import hashlib
import importlib
import json
import shutil
import sys
from pathlib import Path

import pytest
import torch

from mxserve.default_model import default_model_path
from mxserve.model.checkpoint import CheckpointReader, CheckpointWriter
from mxserve.model.checkpoint.files import SafetensorsDir

TOOLS = Path(__file__).resolve().parents[2] / "tools" / "dspark"
TARGET_SHARDS = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")
DRAFT_TENSOR = "mtp.0.attn.attn_sink"  # a plain F32 tensor: easy to perturb
TARGET_TENSOR = "layers.0.attn.attn_sink"


@pytest.fixture(scope="module")
def ship_draft():
    sys.path.insert(0, str(TOOLS))
    try:
        yield importlib.import_module("ship_draft")
    finally:
        sys.path.remove(str(TOOLS))


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def packaged_copy(tmp_path: Path) -> Path:
    dst = tmp_path / "packaged"
    shutil.copytree(default_model_path(), dst, ignore=shutil.ignore_patterns("__pycache__", "*.py"))
    return dst


def trained_like_the_writer(tmp_path: Path, perturb: str | None = None, config_edit: dict | None = None) -> Path:
    """A single-shard copy of the packaged model, as train_draft.py writes it; `perturb` adds 1.0 to
    one F32 tensor, `config_edit` overrides config.json keys."""
    src = SafetensorsDir(default_model_path())
    config = json.loads((default_model_path() / "config.json").read_text())
    config.update(config_edit or {})
    out = tmp_path / "trained"
    with CheckpointWriter(out, config) as writer:
        for name in sorted(src.entries, key=lambda n: (src.entries[n].file.name, src.entries[n].begin)):
            tensor = src.raw(name).clone()
            writer.add_tensor(name, tensor + 1.0 if name == perturb else tensor)
    return out


def test_shipping_a_new_draft_keeps_the_target_shards_and_validates(ship_draft, tmp_path: Path) -> None:
    dst = packaged_copy(tmp_path)
    before = {name: sha256(dst / name) for name in TARGET_SHARDS}
    trained = trained_like_the_writer(tmp_path, perturb=DRAFT_TENSOR)
    assert ship_draft.main([str(trained), str(dst)]) == 0
    assert {name: sha256(dst / name) for name in TARGET_SHARDS} == before
    shipped = SafetensorsDir(dst)
    assert shipped.entries[DRAFT_TENSOR].file.name == ship_draft.DRAFT_SHARD
    packaged = SafetensorsDir(default_model_path())
    assert torch.equal(shipped.raw(DRAFT_TENSOR), packaged.raw(DRAFT_TENSOR) + 1.0)
    CheckpointReader(dst).validate()  # manifest re-hashed over the new draft shard


def test_shipping_the_packaged_draft_again_changes_no_byte(ship_draft, tmp_path: Path) -> None:
    dst = packaged_copy(tmp_path)
    names = sorted(p.name for p in dst.iterdir() if p.suffix in (".json", ".safetensors"))
    before = {name: sha256(dst / name) for name in names}
    assert ship_draft.main([str(trained_like_the_writer(tmp_path)), str(dst)]) == 0
    assert {name: sha256(dst / name) for name in names} == before


@pytest.mark.parametrize(
    ("perturb", "config_edit", "message"),
    [
        (TARGET_TENSOR, None, f"1 target tensors differ in dtype, shape or bytes, e.g. ['{TARGET_TENSOR}']"),
        (None, {"rope_theta": 20000.0}, "config.json: rope_theta differs: packaged 10000.0, trained 20000.0"),
        (None, {"compress_ratios": [0, 0, 4, 128, 4, 128, 4, 4, 0, 0, 0]}, "config.json: compress_ratios differs"),
    ],
)
def test_a_changed_target_is_refused_and_nothing_is_written(ship_draft, tmp_path: Path, capsys, perturb,
                                                            config_edit, message) -> None:
    dst = packaged_copy(tmp_path)
    before = {p.name: sha256(p) for p in dst.iterdir() if p.is_file()}
    assert ship_draft.main([str(trained_like_the_writer(tmp_path, perturb, config_edit)), str(dst)]) == 1
    assert message in capsys.readouterr().err
    assert {p.name: sha256(p) for p in dst.iterdir() if p.is_file()} == before
