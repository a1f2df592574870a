"""Writing a checkpoint: sharded safetensors, index, config.json and the SHA-256 manifest.

`CheckpointWriter` streams: tensors are buffered only up to `max_shard_bytes`, then written as
one shard and dropped, so a 160 GB checkpoint is written with a few GB of memory. Shards are
named `model-0000k-of-0000N.safetensors` (renamed at `close()`, when N is known), the index maps
every tensor to its shard, and `mxserve-manifest.json` records the SHA-256 and size of every
file written (hashed while writing, not re-read). Packed weights are written in the release's
dtypes: FP8 codes as F8_E4M3, MXFP4 codes as I8, scales as F8_E8M0 (byte-for-byte).

The writer does not know DeepSeek-V4 names; `add_linear` only turns a `QuantizedWeight` into
`<prefix>.weight` + `<prefix>.scale`. Callers decide the layout (release or transformers).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
from pathlib import Path
from types import TracebackType
from typing import Any

import torch

from mxserve.formats import QuantizedWeight
from mxserve.model.checkpoint.errors import CheckpointError
from mxserve.model.checkpoint.files import DTYPE_NAMES, INDEX_NAME
from mxserve.model.checkpoint.manifest import write_manifest

DEFAULT_MAX_SHARD_BYTES = 4 * 1024**3


def parse_size(text: str | int) -> int:
    """'4GB', '500MB', '1GiB', '123' -> bytes."""
    if isinstance(text, int):
        return text
    units = {"kib": 1024, "mib": 1024**2, "gib": 1024**3, "kb": 10**3, "mb": 10**6, "gb": 10**9, "b": 1}
    s = text.strip().lower()
    for unit, factor in units.items():
        if s.endswith(unit):
            return int(float(s[: -len(unit)]) * factor)
    return int(s)


def release_tensors_of(prefix: str, weight: QuantizedWeight | torch.Tensor) -> list[tuple[str, torch.Tensor]]:
    """The stored tensors of one linear: packed codes + E8M0 scale, or the full-precision weight."""
    if isinstance(weight, torch.Tensor):
        return [(f"{prefix}.weight", weight)]
    layout = getattr(weight.layout, "name", str(weight.layout)).upper()
    codes = weight.codes.contiguous()
    if "MXFP4" in layout:
        codes = codes.view(torch.int8)
    else:
        codes = codes.view(torch.float8_e4m3fn)
    scales = weight.scales.contiguous().view(torch.float8_e8m0fnu)
    return [(f"{prefix}.weight", codes), (f"{prefix}.scale", scales)]


def _tensor_bytes(t: torch.Tensor) -> torch.Tensor:
    return t.detach().contiguous().reshape(-1).view(torch.uint8)


class CheckpointWriter:
    """Stream tensors into a sharded safetensors checkpoint directory (created if needed)."""

    def __init__(self, path: str | Path, config_json: dict[str, Any], *,
                 max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES) -> None:
        self.path = Path(path)
        if max_shard_bytes <= 0:
            raise CheckpointError(f"max shard size must be positive, got {max_shard_bytes}")
        self.path.mkdir(parents=True, exist_ok=True)
        self.config_json = config_json
        self.max_shard_bytes = max_shard_bytes
        self._pending: list[tuple[str, torch.Tensor]] = []
        self._pending_bytes = 0
        self._shards: list[tuple[Path, list[str], str]] = []  # (temp path, names, sha256)
        self._names: set[str] = set()
        self._extra_files: list[str] = []
        self._total_bytes = 0
        self._closed = False

    # ------------------------------------------------------------------ adding
    def add_tensor(self, name: str, tensor: torch.Tensor) -> None:
        if name in self._names:
            raise CheckpointError(f"{self.path}: tensor {name} written twice")
        if tensor.dtype not in DTYPE_NAMES:
            raise CheckpointError(f"{self.path}: tensor {name}: dtype {tensor.dtype} has no safetensors name")
        nbytes = tensor.numel() * tensor.element_size()
        if self._pending and self._pending_bytes + nbytes > self.max_shard_bytes:
            self._flush()
        self._names.add(name)
        self._pending.append((name, tensor.detach().contiguous()))
        self._pending_bytes += nbytes

    def add_linear(self, prefix: str, weight: QuantizedWeight | torch.Tensor) -> None:
        """`<prefix>.weight` (+ `<prefix>.scale` for a packed weight)."""
        for name, tensor in release_tensors_of(prefix, weight):
            self.add_tensor(name, tensor)

    def copy_file(self, src: Path, name: str | None = None) -> None:
        """Copy a side file (tokenizer.json, ...) into the checkpoint; it joins the manifest."""
        name = name or src.name
        shutil.copyfile(src, self.path / name)
        self._extra_files.append(name)

    # ------------------------------------------------------------------ shards
    def _flush(self) -> None:
        if not self._pending:
            return
        header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
        offset = 0
        for name, tensor in self._pending:
            nbytes = tensor.numel() * tensor.element_size()
            header[name] = {"dtype": DTYPE_NAMES[tensor.dtype], "shape": list(tensor.shape),
                            "data_offsets": [offset, offset + nbytes]}
            offset += nbytes
        blob = json.dumps(header, separators=(",", ":")).encode()
        blob += b" " * (-len(blob) % 8)  # the data section starts 8-byte aligned
        temp = self.path / f".shard-{len(self._shards):05d}.safetensors.partial"
        digest = hashlib.sha256()
        with temp.open("wb") as fh:
            for chunk in (struct.pack("<Q", len(blob)), blob):
                fh.write(chunk)
                digest.update(chunk)
            for _, tensor in self._pending:
                data = _tensor_bytes(tensor).numpy()
                fh.write(data)
                digest.update(data)
        self._shards.append((temp, [n for n, _ in self._pending], digest.hexdigest()))
        self._total_bytes += offset
        self._pending, self._pending_bytes = [], 0

    def close(self) -> Path:
        """Write the last shard, rename shards, index, config.json and the manifest."""
        if self._closed:
            return self.path
        self._flush()
        n = max(len(self._shards), 1)
        weight_map: dict[str, str] = {}
        digests: dict[str, str] = {}
        shard_names = []
        for k, (temp, names, sha) in enumerate(self._shards, start=1):
            final = f"model-{k:05d}-of-{n:05d}.safetensors"
            temp.replace(self.path / final)
            shard_names.append(final)
            digests[final] = sha
            weight_map.update(dict.fromkeys(names, final))
        index = {"metadata": {"total_size": self._total_bytes}, "weight_map": dict(sorted(weight_map.items()))}
        (self.path / INDEX_NAME).write_text(json.dumps(index, indent=2) + "\n")
        (self.path / "config.json").write_text(json.dumps(self.config_json, indent=2) + "\n")
        write_manifest(self.path, [*shard_names, INDEX_NAME, "config.json", *self._extra_files], digests)
        self._closed = True
        return self.path

    def __enter__(self) -> CheckpointWriter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc_type is None:
            self.close()
        else:  # leave no half-written shards that look finished
            for temp, _, _ in self._shards:
                temp.unlink(missing_ok=True)
