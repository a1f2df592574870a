"""Write the target's checkpoint plus trained DSpark stages in the 0731 release layout.

Target tensors are copied as stored (packed FP8/MXFP4 stay packed, byte for byte); every `mtp.*`
tensor is quantized like the release keeps it (`to_release`: FP8 128x128 UE8M0 blocks for dense
linears, MXFP4 for routed experts; plain tensors in their inventory dtype). config.json gains the
`dspark_*` keys and three trailing 0s in `compress_ratios` (the draft stages are sliding-only).
Side files (tokenizer, generation config, model card files) are copied into the manifest.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from mxserve.config import DSparkConfig, ModelConfig
from mxserve.model.checkpoint import CheckpointReader, CheckpointWriter, build_inventory, to_release
from mxserve.model.checkpoint.files import INDEX_NAME
from mxserve.model.checkpoint.manifest import MANIFEST_NAME

_DTYPES = {"BF16": torch.bfloat16, "F32": torch.float32, "I64": torch.int64}


def with_dspark(config: ModelConfig, spec: DSparkConfig) -> ModelConfig:
    """`config` turned into the 0731 layout with draft `spec`. A draft `config` already has (the
    packaged default model ships one) is replaced: only the target's layers are kept."""
    ratios = tuple(config.compress_ratios[: config.num_hidden_layers]) + (0,) * spec.num_stages
    return dataclasses.replace(config, compress_ratios=ratios, dspark=spec)


def write_draft_checkpoint(src: Path, dst: Path, config: ModelConfig, draft: dict[str, torch.Tensor]) -> Path:
    """`draft`: fp32 values of every `mtp.*` inventory entry (linears by prefix, tensors by name)."""
    reader = CheckpointReader(src)
    inventory = build_inventory(config)
    with CheckpointWriter(dst, config.to_dict()) as writer:
        for prefix, spec in inventory.linears.items():
            if prefix.startswith("mtp."):
                writer.add_linear(prefix, to_release(draft[prefix], spec))
            else:
                writer.add_linear(prefix, reader.load_linear(prefix))
        for name, spec in inventory.tensors.items():
            if name.startswith("mtp."):
                writer.add_tensor(name, draft[name].to(_DTYPES[spec.dtype]))
            else:
                writer.add_tensor(name, reader.load_tensor(name))
        skip = {"config.json", INDEX_NAME, MANIFEST_NAME}
        for f in sorted(Path(src).iterdir()):
            if f.is_file() and f.suffix != ".safetensors" and f.name not in skip and not f.name.endswith(".py"):
                writer.copy_file(f)
    return Path(dst)
