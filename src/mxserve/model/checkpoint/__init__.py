"""DeepSeek-V4 checkpoints: the release layout's inventory, reading, writing, converting.

Public API:
* `build_inventory(config) -> Inventory` — every expected tensor (linears and plain tensors);
* `CheckpointReader(path)` — `.config`, `.tensor_names`, `.validate()`, `.load()`,
  `.manifest_status`, `.bytes_by_format()`;
* `CheckpointWriter(path, config_json)` — streamed shards + index + config + SHA-256 manifest;
* `convert_checkpoint(src, dst, to=..., quantize=...)` — release ↔ transformers;
* `CheckpointError` — the one exception, one line naming the file/tensor.
"""

from mxserve.model.checkpoint.convert import convert_checkpoint
from mxserve.model.checkpoint.errors import CheckpointError
from mxserve.model.checkpoint.inventory import (
    Inventory,
    LinearSpec,
    ReleaseFormat,
    TensorSpec,
    build_inventory,
)
from mxserve.model.checkpoint.manifest import MANIFEST_NAME, verify_manifest, write_manifest
from mxserve.model.checkpoint.quantize import to_full_precision, to_release
from mxserve.model.checkpoint.reader import CheckpointReader
from mxserve.model.checkpoint.writer import CheckpointWriter

__all__ = [
    "MANIFEST_NAME",
    "CheckpointError",
    "CheckpointReader",
    "CheckpointWriter",
    "Inventory",
    "LinearSpec",
    "ReleaseFormat",
    "TensorSpec",
    "build_inventory",
    "convert_checkpoint",
    "to_full_precision",
    "to_release",
    "verify_manifest",
    "write_manifest",
]
