"""Reading a release-layout DeepSeek-V4 checkpoint: validate it, then load it packed.

`CheckpointReader(path)` opens `config.json` and the safetensors headers (nothing else) and
derives the expected inventory from the config. `validate()` checks every tensor's name, dtype
and shape against it (missing, extra, misshaped, mistyped tensors; a config that promises more
layers or experts than the weights hold), scans the scale bytes for NaN (255) and the hash table
for out-of-range experts, and verifies the SHA-256 manifest when one is present. `load()`
returns the weights keyed by linear prefix (`layers.0.attn.wq_a`) for linears and by full name
for plain tensors; FP8 / MXFP4 linears stay packed as `QuantizedWeight` over memory-mapped
bytes, E8M0 scales are reinterpreted as bytes (never numerically cast), and nothing is widened
to BF16. Every failure is a one-line `CheckpointError` naming the file or tensor.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import torch
from tqdm import tqdm

from mxserve.config import ModelConfig
from mxserve.formats import E4M3FN, QuantizedWeight
from mxserve.model.checkpoint.errors import CheckpointError
from mxserve.model.checkpoint.files import INDEX_NAME, SafetensorsDir, TensorEntry
from mxserve.model.checkpoint.inventory import (
    F8_E4M3,
    F8_E8M0,
    F32,
    FULL_PRECISION_DTYPES,
    I8,
    I64,
    U8,
    Inventory,
    LinearSpec,
    ReleaseFormat,
    TensorSpec,
    build_inventory,
)
from mxserve.model.checkpoint.manifest import MANIFEST_NAME, read_manifest, verify_manifest

Weight = torch.Tensor | QuantizedWeight

_BLOCK_RE = re.compile(r"^(layers|mtp)\.(\d+)\.")
_EXPERT_RE = re.compile(r"^(.*\.ffn\.experts)\.(\d+)\.")


def _describe(dtype: str, shape: tuple[int, ...]) -> str:
    return f"{dtype} {list(shape)}"


def e8m0_bytes_from_f32(scale: torch.Tensor, name: str) -> torch.Tensor:
    """Exact UE8M0 bytes of an F32 power-of-two scale tensor (V4-Flash-Base stores F32 scales)."""
    mantissa, exponent = torch.frexp(scale.float())
    if not bool(((mantissa == 0.5) & torch.isfinite(scale)).all()):
        raise CheckpointError(f"tensor {name}: F32 scale is not an exact power of two, cannot be UE8M0")
    biased = exponent.to(torch.int32) - 1 + 127
    if bool(((biased < 0) | (biased > 254)).any()):
        raise CheckpointError(f"tensor {name}: F32 scale outside the UE8M0 range 2^-127..2^127")
    return biased.to(torch.uint8)


class CheckpointReader:
    """A release-layout checkpoint directory, checked against the inventory of its config."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if not self.path.is_dir():
            raise CheckpointError(f"{self.path}: no such checkpoint directory")
        self.config: ModelConfig = ModelConfig.from_file(self.path / "config.json")
        self.files = SafetensorsDir(self.path)
        self.inventory: Inventory = build_inventory(self.config)
        self._manifest_files: int | None = None  # files verified, once verified

    # ------------------------------------------------------------------ facts
    @property
    def tensor_names(self) -> list[str]:
        return sorted(self.files.entries)

    @property
    def num_tensors(self) -> int:
        return len(self.files.entries)

    @property
    def manifest_status(self) -> str:
        """'absent', 'present (not verified)' or 'verified (N files)'."""
        if self._manifest_files is not None:
            return f"verified ({self._manifest_files} files)"
        return "absent" if read_manifest(self.path) is None else "present (not verified)"

    def _where(self, name: str) -> str:
        return f"{self.files.entries[name].file}: tensor {name}"

    # ------------------------------------------------------------------ validation
    def verify_manifest(self) -> str:
        """Re-hash the files the manifest lists; raises CheckpointError on a mismatch."""
        required = [*list(self.files.shard_names), "config.json"]
        if (self.path / INDEX_NAME).exists():
            required.append(INDEX_NAME)
        checked = verify_manifest(self.path, required)
        if checked is not None:
            self._manifest_files = checked
        return self.manifest_status

    def _linear_is_quantized(self, spec: LinearSpec) -> bool:
        """Check the stored form of one linear; True when it is stored packed with a scale."""
        entries = self.files.entries
        w = entries.get(spec.weight_name)
        s = entries.get(spec.scale_name)
        if w is None:
            raise CheckpointError(self._missing_message(spec.weight_name, *spec.release_tensors()[0][1:]))
        if s is None:
            if w.dtype not in FULL_PRECISION_DTYPES:
                if spec.is_quantized:
                    raise CheckpointError(f"{self.path}: tensor {spec.scale_name} is missing (its weight is {w.dtype})")
                raise CheckpointError(f"{self._where(w.name)}: dtype {w.dtype}, expected one of {list(FULL_PRECISION_DTYPES)}")
            if w.shape != spec.logical_shape:
                raise CheckpointError(
                    f"{self._where(w.name)}: shape {list(w.shape)}, expected {list(spec.logical_shape)}"
                )
            return False
        if not spec.is_quantized:
            raise CheckpointError(f"{self._where(s.name)}: unexpected scale, {spec.prefix} is BF16 in the release")
        (_, w_dtype, w_shape), (_, s_dtype, s_shape) = spec.release_tensors()
        ok_w_dtypes = (w_dtype,) if spec.release_format is ReleaseFormat.FP8_BLOCK else (I8, U8)
        if w.dtype not in ok_w_dtypes:
            raise CheckpointError(f"{self._where(w.name)}: dtype {w.dtype}, expected {w_dtype}")
        if w.shape != w_shape:
            raise CheckpointError(f"{self._where(w.name)}: shape {list(w.shape)}, expected {list(w_shape)}")
        if s.dtype not in (s_dtype, F32):
            raise CheckpointError(f"{self._where(s.name)}: dtype {s.dtype}, expected {s_dtype}")
        if s.shape != s_shape:
            raise CheckpointError(f"{self._where(s.name)}: shape {list(s.shape)}, expected {list(s_shape)}")
        return True

    def _check_tensor(self, spec: TensorSpec) -> None:
        entry = self.files.entries.get(spec.name)
        if entry is None:
            raise CheckpointError(self._missing_message(spec.name, spec.dtype, spec.shape))
        if not spec.accepts(entry.dtype):
            raise CheckpointError(f"{self._where(spec.name)}: dtype {entry.dtype}, expected {spec.dtype}")
        if entry.shape != spec.shape:
            raise CheckpointError(f"{self._where(spec.name)}: shape {list(entry.shape)}, expected {list(spec.shape)}")

    def _missing_message(self, name: str, dtype: str, shape: tuple[int, ...]) -> str:
        """Say 'config/weights mismatch' when a whole block or expert is absent, else name the tensor."""
        c = self.config
        block = _BLOCK_RE.match(name)
        if block and not any(n.startswith(block.group(0)) for n in self.files.entries):
            key = "num_hidden_layers" if block.group(1) == "layers" else "the MTP/DSpark stage count"
            value = c.num_hidden_layers if block.group(1) == "layers" else ""
            return (f"{self.path}: config.json {key}{'=' + str(value) if value != '' else ''} expects block "
                    f"{block.group(0)[:-1]} but the weights have no tensor under it (config/weights mismatch)")
        expert = _EXPERT_RE.match(name)
        if expert and not any(n.startswith(expert.group(0)) for n in self.files.entries):
            return (f"{self.path}: config.json n_routed_experts={c.n_routed_experts} but the weights have no "
                    f"{expert.group(0)[:-1]} (config/weights mismatch)")
        return f"{self.path}: tensor {name} ({_describe(dtype, shape)}) is missing"

    def check_structure(self) -> dict[str, bool]:
        """Names, dtypes and shapes against the inventory (headers only); returns prefix -> packed."""
        packed = {prefix: self._linear_is_quantized(spec) for prefix, spec in self.inventory.linears.items()}
        for spec in self.inventory.tensors.values():
            self._check_tensor(spec)
        expected = set(self.inventory.tensors)
        for spec in self.inventory.linears.values():
            expected.add(spec.weight_name)
            if packed[spec.prefix]:
                expected.add(spec.scale_name)
        for name in self.tensor_names:
            if name not in expected:
                raise CheckpointError(f"{self._where(name)}: not expected by config.json ({self.config.layout.value} layout)")
        return packed

    def check_values(self, packed: dict[str, bool], progress: bool = False) -> None:
        """Data checks that need bytes: NaN (255) E8M0 scale bytes, tid2eid range."""
        names = [self.inventory.linears[p].scale_name for p, q in packed.items() if q]
        names += [n for n, t in self.inventory.tensors.items() if t.dtype == I64]
        for name in tqdm(names, desc="checking scales", unit="tensor", disable=not progress, leave=False):
            entry = self.files.entries[name]
            if entry.dtype == F8_E8M0:
                raw = self.files.raw_bytes(name)
                bad = (raw == 255).nonzero()
                if bad.numel():
                    raise CheckpointError(f"{self._where(name)}: NaN scale byte 255 at {bad[0].tolist()}")
            elif entry.dtype == F32:
                scale = self.files.raw(name)
                if not bool((torch.isfinite(scale) & (scale > 0)).all()):
                    raise CheckpointError(f"{self._where(name)}: non-finite or non-positive F32 scale")
            elif entry.dtype == I64:
                table = self.files.raw(name)
                if table.numel() and (int(table.min()) < 0 or int(table.max()) >= self.config.n_routed_experts):
                    raise CheckpointError(
                        f"{self._where(name)}: expert ids outside [0, {self.config.n_routed_experts})"
                    )

    def validate(self, *, verify_manifest: bool = True, check_values: bool = True, progress: bool = False) -> None:
        """Full check: manifest (when present and asked), structure, then NaN scales / tid2eid."""
        if verify_manifest:
            self.verify_manifest()
        packed = self.check_structure()
        if check_values:
            self.check_values(packed, progress)

    # ------------------------------------------------------------------ loading
    def _entry(self, name: str) -> TensorEntry:
        return self.files.entries[name]

    def load_linear(self, prefix: str) -> Weight:
        """One linear: a packed QuantizedWeight, or its full-precision tensor (memory-mapped)."""
        spec = self.inventory.linears[prefix]
        if spec.scale_name not in self.files:
            return self.files.raw(spec.weight_name)
        scale_entry = self._entry(spec.scale_name)
        if scale_entry.dtype == F32:
            scales = e8m0_bytes_from_f32(self.files.raw(spec.scale_name), spec.scale_name)
        else:
            scales = self.files.raw_bytes(spec.scale_name)
        if bool((scales == 255).any()):
            raise CheckpointError(f"{self._where(spec.scale_name)}: NaN scale byte 255")
        codes = self.files.raw(spec.weight_name).view(torch.uint8)
        if spec.release_format is ReleaseFormat.MXFP4:
            return QuantizedWeight.from_mxfp4(codes, scales, spec.in_features)
        return QuantizedWeight.from_fp8_block(codes, scales, block=spec.block, fmt=E4M3FN)

    def load_tensor(self, name: str) -> torch.Tensor:
        return self.files.raw(name)

    def iter_weights(self, progress: bool = False) -> Iterator[tuple[str, Weight]]:
        """(key, weight) for every linear prefix and plain tensor, in inventory order."""
        total = len(self.inventory.linears) + len(self.inventory.tensors)
        with tqdm(total=total, desc=f"loading {self.path.name}", unit="tensor", disable=not progress) as bar:
            for prefix in self.inventory.linears:
                yield prefix, self.load_linear(prefix)
                bar.update()
            for name in self.inventory.tensors:
                yield name, self.load_tensor(name)
                bar.update()

    def load(self, *, progress: bool = True, verify_manifest: bool = True) -> dict[str, Weight]:
        """Validate, then map every weight (nothing is copied or widened; pages load on use)."""
        self.validate(verify_manifest=verify_manifest, check_values=True, progress=progress)
        return dict(self.iter_weights(progress))

    # ------------------------------------------------------------------ reporting
    def bytes_by_format(self) -> dict[str, int]:
        """Stored bytes per kind: fp8 codes, mxfp4 codes, ue8m0/f32 scales, bf16, f32, i64, ..."""
        out: dict[str, int] = {}
        scale_names = {s.scale_name for s in self.inventory.linears.values()}
        for name, entry in self.files.entries.items():
            spec = self.inventory.linear_of(name)
            if name in scale_names:
                key = "ue8m0 scales" if entry.dtype == F8_E8M0 else f"{entry.dtype.lower()} scales"
            elif entry.dtype == F8_E4M3:
                key = "fp8 e4m3 codes"
            elif spec is not None and spec.release_format is ReleaseFormat.MXFP4 and entry.dtype in (I8, U8):
                key = "mxfp4 e2m1 codes"
            else:
                key = entry.dtype.lower()
            out[key] = out.get(key, 0) + entry.nbytes
        return out


__all__ = ["MANIFEST_NAME", "CheckpointReader", "e8m0_bytes_from_f32"]
