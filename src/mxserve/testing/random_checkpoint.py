"""Release-layout checkpoints with realistic random weights, written without transformers.

Benchmarks use this at full DeepSeek-V4-Flash size (~160 GB), so it streams: each tensor is
generated, quantized to the release format, handed to the shard writer and dropped; at most one
shard is held in memory. Magnitudes are chosen to look like a trained model to the forward
pass: linears are normal with std 1/sqrt(in) (then quantized: FP8 blocks, MXFP4 experts),
norms near 1, non-zero attention sinks, mHC bases and scales, compressor position biases
(`ape`), router bias; `tid2eid` holds `num_experts_per_tok` distinct experts per token.
Everything derives from `seed` and the tensor's name, so any one tensor is reproducible alone.
"""

from __future__ import annotations

import math
import zlib
from pathlib import Path

import torch
from tqdm import tqdm

from mxserve.config import ModelConfig
from mxserve.model.checkpoint import CheckpointWriter, build_inventory, to_release
from mxserve.model.checkpoint.inventory import BF16, F32, I64, TensorSpec
from mxserve.model.checkpoint.writer import DEFAULT_MAX_SHARD_BYTES
from mxserve.testing.tiny_configs import get_config

_TORCH = {BF16: torch.bfloat16, F32: torch.float32, I64: torch.int64}


def _generator(seed: int, name: str) -> torch.Generator:
    return torch.Generator().manual_seed((seed * 1_000_003 + zlib.crc32(name.encode())) % (2**63))


def random_plain_tensor(spec: TensorSpec, config: ModelConfig, seed: int) -> torch.Tensor:
    """A plausible value for one plain tensor, keyed by its name's role."""
    g = _generator(seed, spec.name)
    shape, name = spec.shape, spec.name
    leaf = name.rsplit(".", 2)

    def normal(std: float, mean: float = 0.0) -> torch.Tensor:
        return torch.randn(shape, generator=g) * std + mean

    if name.endswith("tid2eid"):
        # num_experts_per_tok distinct experts per token id: the first k of a random permutation.
        keys = torch.rand(shape[0], config.n_routed_experts, generator=g)
        value = keys.argsort(dim=1)[:, : shape[1]]
    elif name.endswith("norm.weight"):  # RMSNorm gains ~1
        value = normal(0.05, 1.0)
    elif name.endswith("attn_sink"):
        value = normal(0.5)
    elif "_fn" in leaf[-1]:  # mHC projections: m = v·fnᵀ ~ N(0, 1) for unit-RMS v
        value = normal(1.0 / math.sqrt(shape[-1]))
    elif name.endswith("_base"):
        value = normal(0.3)
    elif name.endswith("_scale"):  # mHC scales: positive, order 1
        value = normal(0.1, 1.0).abs() + 0.1
    elif name.endswith(".ape"):
        value = normal(0.1)
    elif name.endswith("gate.bias"):
        value = normal(0.05)
    elif name.endswith("gate.weight") or name == "head.weight" or name.endswith("confidence_head.proj.weight"):
        value = normal(1.0 / math.sqrt(shape[-1]))
    else:  # embeddings, Markov head factors
        value = normal(0.02)
    return value.to(_TORCH[spec.dtype])


def random_checkpoint(config: ModelConfig | str, path: str | Path, seed: int = 0, *,
                      max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES, progress: bool = True) -> Path:
    """Write a release-layout checkpoint for `config` (a ModelConfig or a name in TINY_CONFIGS).

    Returns the checkpoint directory. Deterministic in (config, seed).
    """
    if isinstance(config, str):
        config = get_config(config)
    inventory = build_inventory(config)
    total = len(inventory.linears) + len(inventory.tensors)
    with CheckpointWriter(path, config.to_dict(), max_shard_bytes=max_shard_bytes) as writer, tqdm(
        total=total, desc=f"writing {Path(path).name}", unit="tensor", disable=not progress
    ) as bar:
        for spec in inventory.tensors.values():
            writer.add_tensor(spec.name, random_plain_tensor(spec, config, seed))
            bar.update()
        for prefix, lin in inventory.linears.items():
            w = torch.randn(lin.logical_shape, generator=_generator(seed, prefix)) / math.sqrt(lin.in_features)
            writer.add_linear(prefix, to_release(w, lin))
            bar.update()
    return Path(path)
