"""`convert`: between transformers' DeepseekV4 layout and the release layout, both ways.

To the release layout (from a transformers `save_pretrained` directory, either spelling, or
from a release checkpoint to re-quantize / dequantize it): every linear goes through the
release's format choice (`quantize=True`: FP8 128x128 dense, MXFP4 experts, BF16 compressor /
indexer projections, plain tensors in their release dtype) or stays in full precision
(`quantize=False`: packed inputs are dequantized exactly, full-precision inputs keep their
dtype, so a transformers → release → transformers trip is bit-exact). To the transformers
layout: packed weights are dequantized (exact in BF16), experts are packed into
`gate_up_proj` / `down_proj`, and `mtp.*` tensors are carried under their release names
(transformers ignores `mtp.*` on load; converting back restores them). Tokenizer files are
copied along. Output is written tensor by tensor through `CheckpointWriter` (with manifest).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import torch
from tqdm import tqdm

from mxserve.config import ConfigError, ModelConfig
from mxserve.formats import QuantizedWeight
from mxserve.model.checkpoint import hf_names as names
from mxserve.model.checkpoint.errors import CheckpointError
from mxserve.model.checkpoint.files import INDEX_NAME, SINGLE_NAME, SafetensorsDir
from mxserve.model.checkpoint.hf_config import hf_to_release_config, release_to_hf_config
from mxserve.model.checkpoint.inventory import F32, I64, Inventory, build_inventory
from mxserve.model.checkpoint.quantize import to_full_precision, to_release
from mxserve.model.checkpoint.reader import CheckpointReader
from mxserve.model.checkpoint.writer import DEFAULT_MAX_SHARD_BYTES, CheckpointWriter

_TORCH_DTYPE = {"BF16": torch.bfloat16, "F32": torch.float32, "I64": torch.int64}
_HF_LAYER_RE = re.compile(r"^model\.layers\.(\d+)\.(.+)$")


def is_transformers_layout(src: Path) -> bool:
    """True when `src/config.json` is spelled the transformers way (`layer_types`, no `compress_ratios`)."""
    try:
        raw = json.loads((src / "config.json").read_text())
    except FileNotFoundError:
        raise CheckpointError(f"{src / 'config.json'}: no such file") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{src / 'config.json'}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    return isinstance(raw, dict) and "compress_ratios" not in raw and "layer_types" in raw


class TransformersSource:
    """A transformers-layout directory viewed through release names (full precision)."""

    def __init__(self, src: Path) -> None:
        if not src.is_dir():
            raise CheckpointError(f"{src}: no such checkpoint directory")
        self.src = src
        self.hf_config = json.loads((src / "config.json").read_text())
        self.files = SafetensorsDir(src)
        self._release: dict[str, str] = {}  # release name -> source name (non-expert tensors)
        self._experts: dict[int, tuple[str | None, str | None]] = {}  # layer -> (gate_up, down)
        inverse_block = {hf: rel for rel, hf in names.BLOCK_NAMES.items()}
        inverse_global = {hf: rel for rel, hf in names.GLOBAL_NAMES.items()}
        for key in self.files.entries:
            rel = self._release_name(key, inverse_block, inverse_global)
            if rel is None:
                raise CheckpointError(f"{self.files.entries[key].file}: tensor {key} has no release name")
            if rel in self._release:
                raise CheckpointError(f"{self.files.entries[key].file}: tensor {key} duplicates {self._release[rel]}")
            if rel.startswith("#experts"):
                layer, which = rel.split(":")[1:]
                gate_up, down = self._experts.get(int(layer), (None, None))
                self._experts[int(layer)] = (key, down) if which == "gate_up" else (gate_up, key)
            else:
                self._release[rel] = key
        self.num_mtp_layers = len({k.split(".")[1] for k in self._release if k.startswith("mtp.")})

    @staticmethod
    def _release_name(key: str, inverse_block: dict[str, str], inverse_global: dict[str, str]) -> str | None:
        if key in inverse_global:
            return inverse_global[key]
        if key in names.ORIGINAL_FORMAT_GLOBALS:
            return names.ORIGINAL_FORMAT_GLOBALS[key]
        if key.startswith("mtp."):
            return key
        m = _HF_LAYER_RE.match(key)
        if m:
            layer, rest = m.groups()
            if rest in inverse_block:
                return f"layers.{layer}.{inverse_block[rest]}"
            if rest == names.EXPERTS_GATE_UP:
                return f"#experts:{layer}:gate_up"
            if rest == names.EXPERTS_DOWN:
                return f"#experts:{layer}:down"
            # save_pretrained's default "original format": model. + release name (+ one quirk)
            rest = names.ORIGINAL_FORMAT_BLOCK_FIXUPS.get(rest, rest)
            return f"layers.{layer}.{rest}"
        if key.startswith("model.mtp."):
            return key[len("model."):]
        return None

    def config(self, *, quantized: bool) -> ModelConfig:
        return hf_to_release_config(self.hf_config, quantized=quantized, num_mtp_layers=self.num_mtp_layers)

    def tensor(self, name: str) -> torch.Tensor:
        """The full-precision tensor behind release name `name` (a weight or a plain tensor)."""
        key = self._release.get(name)
        if key is not None:
            return self.files.raw(key)
        m = re.match(r"^layers\.(\d+)\.ffn\.experts\.(\d+)\.(w[123])\.weight$", name)
        if m and int(m.group(1)) in self._experts:
            layer, expert, which = int(m.group(1)), int(m.group(2)), m.group(3)
            gate_up, down = self._experts[layer]
            source = down if which == "w2" else gate_up
            if source is not None:
                packed = self.files.raw(source)
                if expert < packed.shape[0]:
                    if which == "w2":
                        return packed[expert]
                    inter = packed.shape[1] // 2
                    return packed[expert, :inter] if which == "w1" else packed[expert, inter:]
        raise CheckpointError(f"{self.src}: no tensor for release name {name} (config/weights mismatch)")

    def linear(self, prefix: str) -> torch.Tensor:
        return self.tensor(f"{prefix}.weight")

    def check_all_used(self, inventory: Inventory) -> None:
        used = set(inventory.tensors) | {s.weight_name for s in inventory.linears.values()}
        for rel, key in self._release.items():
            if rel not in used:
                raise CheckpointError(f"{self.files.entries[key].file}: tensor {key} is not expected by config.json")


def _copy_side_files(src: Path, writer: CheckpointWriter) -> None:
    for name in names.TOKENIZER_FILES:
        if (src / name).is_file():
            writer.copy_file(src / name)


def _plain_for_release(t: torch.Tensor, release_dtype: str, accepts: bool, quantize: bool) -> torch.Tensor:
    if release_dtype == I64:
        return t.to(torch.int64)
    if quantize or not accepts:
        return t.to(_TORCH_DTYPE[release_dtype])
    return t


def write_release(source: CheckpointReader | TransformersSource, config: ModelConfig, dst: Path, *,
                  quantize: bool, max_shard_bytes: int, progress: bool) -> Path:
    """Write `source`'s weights in the release layout of `config`."""
    inventory = build_inventory(config)
    if isinstance(source, TransformersSource):
        source.check_all_used(inventory)
    total = len(inventory.linears) + len(inventory.tensors)
    with CheckpointWriter(dst, config.to_dict(), max_shard_bytes=max_shard_bytes) as writer, tqdm(
        total=total, desc=f"writing {dst.name}", unit="tensor", disable=not progress
    ) as bar:
        for prefix, spec in inventory.linears.items():
            w = source.linear(prefix) if isinstance(source, TransformersSource) else source.load_linear(prefix)
            if tuple(w.shape) != spec.logical_shape:
                raise CheckpointError(f"{prefix}.weight: shape {list(w.shape)}, expected {list(spec.logical_shape)}")
            if quantize:
                out = w if isinstance(w, QuantizedWeight) else to_release(w, spec)
            else:
                out = to_full_precision(w, torch.bfloat16)
            writer.add_linear(prefix, out)
            bar.update()
        for name, spec in inventory.tensors.items():
            t = source.tensor(name) if isinstance(source, TransformersSource) else source.load_tensor(name)
            if tuple(t.shape) != spec.shape:
                raise CheckpointError(f"{name}: shape {list(t.shape)}, expected {list(spec.shape)}")
            dtype_name = {torch.bfloat16: "BF16", torch.float32: F32, torch.int64: I64}.get(t.dtype, "")
            writer.add_tensor(name, _plain_for_release(t, spec.dtype, spec.accepts(dtype_name), quantize))
            bar.update()
        src = source.src if isinstance(source, TransformersSource) else source.path
        _copy_side_files(src, writer)
    return dst


def _hf_tensors(reader: CheckpointReader) -> Iterator[tuple[str, torch.Tensor]]:
    """(transformers name, full-precision tensor) for a release checkpoint, experts packed per layer."""
    inv, config = reader.inventory, reader.config

    def get(name: str) -> torch.Tensor:
        prefix, _, leaf = name.rpartition(".")
        if leaf == "weight" and prefix in inv.linears:
            return to_full_precision(reader.load_linear(prefix), torch.bfloat16)
        return reader.load_tensor(name)

    for rel, hf in names.GLOBAL_NAMES.items():
        if rel in inv.tensors:
            yield hf, get(rel)
    for i in range(config.num_hidden_layers):
        base = f"layers.{i}."
        for rel, hf in names.BLOCK_NAMES.items():
            if base + rel in inv.tensors or (base + rel).removesuffix(".weight") in inv.linears:
                yield f"model.layers.{i}.{hf}", get(base + rel)
        experts = range(config.n_routed_experts)
        w = {k: [get(base + names.RELEASE_EXPERT.format(e=e, w=k)) for e in experts] for k in ("w1", "w2", "w3")}
        dtype = w["w1"][0].dtype
        yield f"model.layers.{i}.{names.EXPERTS_GATE_UP}", torch.stack(
            [torch.cat([a, b], dim=0).to(dtype) for a, b in zip(w["w1"], w["w3"], strict=True)])
        yield f"model.layers.{i}.{names.EXPERTS_DOWN}", torch.stack([t.to(dtype) for t in w["w2"]])
    for prefix in inv.linears:
        if prefix.startswith("mtp."):
            yield f"{prefix}.weight", get(f"{prefix}.weight")
    for name in inv.tensors:
        if name.startswith("mtp."):
            yield name, get(name)


def write_transformers(reader: CheckpointReader, dst: Path, *, max_shard_bytes: int, progress: bool) -> Path:
    """Write a release checkpoint in transformers' state-dict layout (full precision)."""
    config = reader.config
    total = len(reader.inventory.linears) + len(reader.inventory.tensors)
    packed = any(reader.inventory.linears[p].scale_name in reader.files for p in reader.inventory.linears)
    hf_config = release_to_hf_config(config, "bfloat16" if packed else "float32")
    with CheckpointWriter(dst, hf_config, max_shard_bytes=max_shard_bytes) as writer, tqdm(
        total=total, desc=f"writing {dst.name}", unit="tensor", disable=not progress
    ) as bar:
        for name, tensor in _hf_tensors(reader):
            writer.add_tensor(name, tensor)
            bar.update(tensor.shape[0] * 3 if name.endswith(names.EXPERTS_GATE_UP) else 1)
        _copy_side_files(reader.path, writer)
    return dst


def convert_checkpoint(src: str | Path, dst: str | Path, *, to: str, quantize: bool | None = None,
                       max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES, progress: bool = True) -> Path:
    """Convert `src` to layout `to` ('release' or 'transformers') in `dst`.

    `quantize` (release only): None/True = the release formats, False = full precision.
    Raises CheckpointError / ConfigError with one-line messages.
    """
    src, dst = Path(src), Path(dst)
    if not src.is_dir():
        raise CheckpointError(f"{src}: no such checkpoint directory")
    if dst.exists() and any((dst / n).exists() for n in (INDEX_NAME, SINGLE_NAME, "config.json")):
        raise CheckpointError(f"{dst}: already holds a checkpoint; choose an empty destination")
    if to == "release":
        if is_transformers_layout(src):
            source: CheckpointReader | TransformersSource = TransformersSource(src)
            config = source.config(quantized=quantize is not False)
        else:
            source = CheckpointReader(src)
            source.validate(progress=progress)
            config = source.config
            if quantize is False:
                config = ModelConfig.from_dict({**config.to_dict(), "quantization_config": None})
        return write_release(source, config, dst, quantize=quantize is not False,
                             max_shard_bytes=max_shard_bytes, progress=progress)
    if to == "transformers":
        if quantize:
            raise CheckpointError("--quantize: the transformers layout is written in full precision only")
        if is_transformers_layout(src):
            raise CheckpointError(f"{src}: already in the transformers layout")
        reader = CheckpointReader(src)
        reader.validate(progress=progress)
        return write_transformers(reader, dst, max_shard_bytes=max_shard_bytes, progress=progress)
    raise CheckpointError(f"unknown target layout {to!r}; use 'release' or 'transformers'")
