"""Safetensors files of a checkpoint directory, read lazily and memory-mapped.

This module owns the byte level: which shard holds which tensor (`model.safetensors.index.json`
or a single `model.safetensors`), each shard's header (parsed here, so a truncated file or an
inconsistent header is caught before any data is touched), and zero-copy tensor views over a
copy-on-write memory map of the shard (`torch.frombuffer`), so reading a 160 GB checkpoint
touches only the pages a caller uses. It knows nothing about DeepSeek-V4 names.
"""

from __future__ import annotations

import json
import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

import torch

from mxserve.model.checkpoint.errors import CheckpointError

INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"
MAX_HEADER_BYTES = 100 * 1024 * 1024

# safetensors dtype string -> (torch dtype, bytes per element)
TORCH_DTYPES: dict[str, tuple[torch.dtype, int]] = {
    "F8_E4M3": (torch.float8_e4m3fn, 1),
    "F8_E5M2": (torch.float8_e5m2, 1),
    "F8_E8M0": (torch.float8_e8m0fnu, 1),
    "I8": (torch.int8, 1),
    "U8": (torch.uint8, 1),
    "I16": (torch.int16, 2),
    "I32": (torch.int32, 4),
    "I64": (torch.int64, 8),
    "F16": (torch.float16, 2),
    "BF16": (torch.bfloat16, 2),
    "F32": (torch.float32, 4),
    "F64": (torch.float64, 8),
    "BOOL": (torch.bool, 1),
}
DTYPE_NAMES: dict[torch.dtype, str] = {t: name for name, (t, _) in TORCH_DTYPES.items()}


@dataclass(frozen=True)
class TensorEntry:
    """Where one tensor lives: its shard, safetensors dtype, shape and byte range in the data."""

    name: str
    file: Path
    dtype: str
    shape: tuple[int, ...]
    begin: int  # byte offset from the start of the data section
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.begin


def read_header(path: Path) -> tuple[dict[str, TensorEntry], dict[str, str], int]:
    """Parse one shard's header: (entries by name, `__metadata__`, data-section offset).

    Raises CheckpointError naming the file if it is missing, truncated or inconsistent.
    """
    try:
        size = path.stat().st_size
        with path.open("rb") as fh:
            head = fh.read(8)
            if len(head) < 8:
                raise CheckpointError(f"{path}: truncated safetensors file ({size} bytes, no header)")
            (header_len,) = struct.unpack("<Q", head)
            if header_len > MAX_HEADER_BYTES or 8 + header_len > size:
                raise CheckpointError(f"{path}: truncated or corrupt safetensors header ({header_len} header bytes, file {size} bytes)")
            raw = fh.read(header_len)
    except FileNotFoundError:
        raise CheckpointError(f"{path}: shard file is missing") from None
    try:
        header = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{path}: safetensors header is not valid JSON ({exc})") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{path}: safetensors header is not a JSON object")
    metadata = header.pop("__metadata__", None) or {}
    data_start = 8 + header_len
    data_len = size - data_start
    entries: dict[str, TensorEntry] = {}
    max_end = 0
    for name, info in header.items():
        try:
            dtype, shape, (begin, end) = info["dtype"], tuple(int(s) for s in info["shape"]), info["data_offsets"]
        except (KeyError, TypeError, ValueError):
            raise CheckpointError(f"{path}: tensor {name}: malformed header entry") from None
        if dtype not in TORCH_DTYPES:
            raise CheckpointError(f"{path}: tensor {name}: unknown dtype {dtype}")
        numel = 1
        for s in shape:
            numel *= s
        if end - begin != numel * TORCH_DTYPES[dtype][1] or begin < 0:
            raise CheckpointError(f"{path}: tensor {name}: byte range [{begin}, {end}) does not fit {dtype} {list(shape)}")
        if end > data_len:
            raise CheckpointError(f"{path}: truncated: tensor {name} ends at byte {end} of a {data_len}-byte data section")
        max_end = max(max_end, end)
        entries[name] = TensorEntry(name, path, dtype, shape, begin, end)
    if max_end != data_len:
        raise CheckpointError(f"{path}: data section is {data_len} bytes but the tensors cover {max_end}")
    return entries, metadata, data_start


class SafetensorsDir:
    """The tensors of a checkpoint directory, by name, with lazy memory-mapped access."""

    def __init__(self, root: Path) -> None:
        self.root = root
        if not root.is_dir():
            raise CheckpointError(f"{root}: no such checkpoint directory")
        index_path = root / INDEX_NAME
        if index_path.exists():
            try:
                index = json.loads(index_path.read_text())
                weight_map = index["weight_map"]
                if not isinstance(weight_map, dict):
                    raise TypeError
            except (json.JSONDecodeError, KeyError, TypeError):
                raise CheckpointError(f"{index_path}: not a valid safetensors index (needs a 'weight_map' object)") from None
            shard_names = sorted(set(weight_map.values()))
        elif (root / SINGLE_NAME).exists():
            weight_map, shard_names = None, [SINGLE_NAME]
        else:
            raise CheckpointError(f"{root}: neither {INDEX_NAME} nor {SINGLE_NAME} found")
        self.shard_names: list[str] = shard_names
        self._data_start: dict[Path, int] = {}
        self.entries: dict[str, TensorEntry] = {}
        for shard in shard_names:
            path = root / shard
            entries, _, data_start = read_header(path)
            self._data_start[path] = data_start
            for name, entry in entries.items():
                if name in self.entries:
                    raise CheckpointError(f"{path}: tensor {name} is also stored in {self.entries[name].file.name}")
                if weight_map is not None and weight_map.get(name) != shard:
                    raise CheckpointError(f"{index_path}: tensor {name} is in {shard} but the index says {weight_map.get(name)}")
                self.entries[name] = entry
        if weight_map is not None:
            for name, shard in weight_map.items():
                if name not in self.entries:
                    raise CheckpointError(f"{root / shard}: tensor {name} listed in {INDEX_NAME} is not in the shard")
        self._maps: dict[Path, mmap.mmap] = {}

    def __contains__(self, name: str) -> bool:
        return name in self.entries

    def _map(self, path: Path) -> mmap.mmap:
        mm = self._maps.get(path)
        if mm is None:
            with path.open("rb") as fh:
                # Copy-on-write: tensors may be written by callers without touching the file, and
                # torch.frombuffer wants a writable buffer.
                mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_COPY)
            self._maps[path] = mm
        return mm

    def raw(self, name: str) -> torch.Tensor:
        """A zero-copy view of tensor `name` in its stored dtype (E8M0 as float8_e8m0fnu)."""
        entry = self.entries[name]
        torch_dtype, _ = TORCH_DTYPES[entry.dtype]
        if entry.nbytes == 0:
            return torch.empty(entry.shape, dtype=torch_dtype)
        start = self._data_start[entry.file] + entry.begin
        flat = torch.frombuffer(self._map(entry.file), dtype=torch.uint8, count=entry.nbytes, offset=start)
        return flat.view(torch_dtype).reshape(entry.shape)

    def raw_bytes(self, name: str) -> torch.Tensor:
        """Tensor `name` reinterpreted as uint8 bytes of its stored shape (1-byte dtypes only)."""
        return self.raw(name).view(torch.uint8)
