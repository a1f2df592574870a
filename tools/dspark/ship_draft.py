"""Ship a trained DSpark draft into a packaged checkpoint as its own shard (issue 13, deliverable 4).

    PYTHONPATH=src python tools/dspark/ship_draft.py TRAINED_DIR src/mxserve/default_model

TRAINED_DIR is train_draft.py's output: one shard holding the target AND the `mtp.*` draft. The
packaged directory keeps its target shards byte for byte (a small git diff, and the target is
provably the one quality.json and the model card describe); the draft goes into DRAFT_SHARD.

Refuses (exit 1, one line) unless every non-`mtp.*` tensor of TRAINED_DIR is byte-identical
(dtype, shape, raw bytes) to the packaged one and every config.json key outside the draft is
unchanged (`dspark_*` keys may change; `compress_ratios` only past num_hidden_layers, where the
draft stages' entries live). A draft already shipped is replaced. Writes DRAFT_SHARD (through
CheckpointWriter), the index, the trained config.json and the manifest (write_manifest, over the
files the old manifest covered plus DRAFT_SHARD), then runs CheckpointReader.validate().
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

import torch

from mxserve.model.checkpoint import CheckpointReader, CheckpointWriter
from mxserve.model.checkpoint.files import INDEX_NAME, SafetensorsDir
from mxserve.model.checkpoint.manifest import read_manifest, write_manifest

DRAFT_SHARD = "model-dspark-draft.safetensors"
DRAFT_PREFIX = "mtp."


class ShipError(RuntimeError):
    """TRAINED_DIR's target or config is not the packaged one; the message names the difference."""


def same_tensor(a: SafetensorsDir, b: SafetensorsDir, name: str) -> bool:
    """Same safetensors dtype, shape and raw bytes (E8M0/FP8 compared as bytes, never as numbers)."""
    ea, eb = a.entries[name], b.entries[name]
    if (ea.dtype, ea.shape) != (eb.dtype, eb.shape):
        return False
    return torch.equal(a.raw(name).reshape(-1).view(torch.uint8), b.raw(name).reshape(-1).view(torch.uint8))


def check_target_unchanged(packaged: SafetensorsDir, trained: SafetensorsDir) -> None:
    want = {n for n in packaged.entries if not n.startswith(DRAFT_PREFIX)}
    got = {n for n in trained.entries if not n.startswith(DRAFT_PREFIX)}
    if want != got:
        raise ShipError(f"target tensor names differ, e.g. {sorted(want ^ got)[:5]}")
    differing = [n for n in sorted(want) if not same_tensor(packaged, trained, n)]
    if differing:
        raise ShipError(f"{len(differing)} target tensors differ in dtype, shape or bytes, e.g. {differing[:5]}")


def check_config_unchanged(packaged: dict, trained: dict) -> None:
    n = packaged["num_hidden_layers"]
    keys = {k for k in packaged.keys() | trained.keys() if not k.startswith("dspark_")}
    for key in sorted(keys):
        old, new = packaged.get(key), trained.get(key)
        if key == "compress_ratios":
            old, new = old[:n], new[:n]  # the tail belongs to the draft stages
        if old != new:
            raise ShipError(f"config.json: {key} differs: packaged {old!r}, trained {new!r}")


def ship(trained_dir: Path, packaged_dir: Path) -> str:
    packaged, trained = SafetensorsDir(packaged_dir), SafetensorsDir(trained_dir)
    check_target_unchanged(packaged, trained)
    trained_cfg = json.loads((trained_dir / "config.json").read_text())
    check_config_unchanged(json.loads((packaged_dir / "config.json").read_text()), trained_cfg)
    draft = sorted((n for n in trained.entries if n.startswith(DRAFT_PREFIX)), key=lambda n: trained.entries[n].begin)
    if not draft:
        raise ShipError(f"{trained_dir}: no {DRAFT_PREFIX}* tensors (not a trained draft)")
    target_shards = {e.file.name for n, e in packaged.entries.items() if not n.startswith(DRAFT_PREFIX)}
    if DRAFT_SHARD in target_shards:
        raise ShipError(f"{packaged_dir / DRAFT_SHARD} holds target tensors; refusing to overwrite it")

    # CheckpointWriter writes the shard (header format, alignment) exactly as the project's
    # checkpoints are written; only the shard is kept from its temporary directory.
    with tempfile.TemporaryDirectory() as tmp:
        with CheckpointWriter(Path(tmp), trained_cfg) as writer:
            for name in draft:
                writer.add_tensor(name, trained.raw(name))
        (shard,) = Path(tmp).glob("*.safetensors")
        shutil.copyfile(shard, packaged_dir / DRAFT_SHARD)
    weight_map = {n: e.file.name for n, e in packaged.entries.items() if not n.startswith(DRAFT_PREFIX)}
    weight_map.update(dict.fromkeys(draft, DRAFT_SHARD))
    total_bytes = sum(e.nbytes for e in trained.entries.values())
    index = {"metadata": {"total_size": total_bytes}, "weight_map": dict(sorted(weight_map.items()))}
    (packaged_dir / INDEX_NAME).write_text(json.dumps(index, indent=2) + "\n")
    shutil.copyfile(trained_dir / "config.json", packaged_dir / "config.json")
    covered = set(read_manifest(packaged_dir) or {}) | {DRAFT_SHARD, INDEX_NAME, "config.json"}
    write_manifest(packaged_dir, covered)

    shipped = SafetensorsDir(packaged_dir)
    not_shipped = [n for n in trained.entries if n not in shipped.entries or not same_tensor(shipped, trained, n)]
    if not_shipped:
        raise ShipError(f"shipped checkpoint differs from {trained_dir}, e.g. {not_shipped[:5]}")
    CheckpointReader(packaged_dir).validate()
    return (f"{packaged_dir}: {len(weight_map) - len(draft)} target tensors unchanged in {sorted(target_shards)}, "
            f"{len(draft)} {DRAFT_PREFIX}* tensors in {DRAFT_SHARD} ({(packaged_dir / DRAFT_SHARD).stat().st_size} "
            f"bytes), manifest over {len(covered)} files, validate() passed")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    try:
        print(ship(Path(args[0]), Path(args[1])))
    except ShipError as exc:
        print(f"ship_draft: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
