"""Shared test helpers: tiny checkpoints on disk and a way to rewrite them with one change."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import torch

from mxserve.model.checkpoint import CheckpointWriter
from mxserve.model.checkpoint.files import SafetensorsDir

Tensors = dict[str, torch.Tensor]


def rewrite(src: Path, dst: Path, edit: Callable[[Tensors], None] | None = None,
            edit_config: Callable[[dict], None] | None = None, max_shard_bytes: int = 1 << 40) -> Path:
    """Copy checkpoint `src` to `dst` after `edit(tensors)` / `edit_config(config)`.

    The copy gets a fresh, consistent manifest, so only the intended defect remains.
    """
    files = SafetensorsDir(src)
    tensors = {name: files.raw(name).clone() for name in files.entries}
    config = json.loads((src / "config.json").read_text())
    if edit is not None:
        edit(tensors)
    if edit_config is not None:
        edit_config(config)
    with CheckpointWriter(dst, config, max_shard_bytes=max_shard_bytes) as writer:
        for name, tensor in tensors.items():
            writer.add_tensor(name, tensor)
    return dst
