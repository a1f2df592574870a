"""Fault injection for testing `mxserve verify` itself (test-only; never imported by serving code).

Each fault is a context manager that patches one function or method for the duration of a
`with` block and restores it afterwards, so production code carries no fault switches. Each one
reproduces a bug class from field-notes §3-§4:

| fault                          | what it patches                           | the bug it imitates |
|--------------------------------|-------------------------------------------|---------------------|
| `corrupt_scale_bytes`          | `CheckpointReader.load` (scales XOR mask) | bit flips in UE8M0 scale bytes |
| `token_interleaved_cache_reader` | `PagedKVCache.read` (fp8_ds_mla mode)   | a reader taking `[B, 584]` for the physical page layout |
| `swapped_e2m1_nibbles`         | `CheckpointReader.load` (MXFP4 codes)     | high/low nibble order swapped when unpacking E2M1 |
| `fnuz_read_as_ocp`             | `CheckpointReader.load` (FP8 weights)     | FNUZ bytes + scales decoded as OCP e4m3fn (every value x2) |
| `wrong_swiglu_clamp`           | `moe.reference.swiglu_clamped`            | gpt-oss SwiGLU (alpha 1.702, up + 1) instead of V4's |
| `nan_in_layer`                 | `deepseek_v4.attention_forward`           | one layer's attention output turning NaN |
| `decode_position_off_by_one`   | `ForwardBatch.from_chunks`                | decode steps at position p - 1 |
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn.functional as F

import mxserve.kernels.moe.reference as moe_reference
import mxserve.model.deepseek_v4 as deepseek_v4
from mxserve.formats import E4M3FN, QuantizedWeight, WeightLayout, fp8_ocp_to_fnuz
from mxserve.kernels.cache import KVCacheMode, PagedKVCache
from mxserve.model.checkpoint import CheckpointReader
from mxserve.model.forward_batch import ForwardBatch


@contextlib.contextmanager
def _patched(owner: Any, name: str, replacement: Any) -> Iterator[None]:
    # For a class, restore exactly what its own __dict__ held (an inherited method is not copied
    # down: the patch is deleted again instead).
    missing = object()
    original = owner.__dict__.get(name, missing) if isinstance(owner, type) else getattr(owner, name)
    setattr(owner, name, replacement)
    try:
        yield
    finally:
        if original is missing:
            delattr(owner, name)
        else:
            setattr(owner, name, original)


def _rewrite_loaded_weights(rewrite: Callable[[str, QuantizedWeight], QuantizedWeight | None]):
    """Patch CheckpointReader.load so every QuantizedWeight passes through `rewrite` (None = keep)."""
    original = CheckpointReader.load

    def load(self, *args, **kwargs):
        weights = original(self, *args, **kwargs)
        out = {}
        for name, w in weights.items():
            new = rewrite(name, w) if isinstance(w, QuantizedWeight) else None
            out[name] = w if new is None else new
        return out

    return _patched(CheckpointReader, "load", load)


def _with(w: QuantizedWeight, *, codes: torch.Tensor | None = None, scales: torch.Tensor | None = None,
          fmt=None) -> QuantizedWeight:
    return QuantizedWeight(w.codes if codes is None else codes, w.scales if scales is None else scales,
                           w.fmt if fmt is None else fmt, w.block, w.shape, w.layout)


def corrupt_scale_bytes(layer: int = 2, xor_mask: int = 0x08):
    """XOR every UE8M0 scale byte of layer `layer`'s quantized weights with `xor_mask` (0x08: each
    block scaled by 2^±8, inside the plausible range, so only numeric stages can see it)."""
    prefix = f"layers.{layer}."

    def rewrite(name: str, w: QuantizedWeight) -> QuantizedWeight | None:
        return _with(w, scales=w.scales ^ xor_mask) if name.startswith(prefix) else None

    return _rewrite_loaded_weights(rewrite)


def swapped_e2m1_nibbles():
    """Every MXFP4 byte with its two E2M1 codes swapped (odd column read as even and back)."""

    def rewrite(name: str, w: QuantizedWeight) -> QuantizedWeight | None:
        if w.layout is not WeightLayout.MXFP4:
            return None
        return _with(w, codes=((w.codes & 0x0F) << 4) | (w.codes >> 4))

    return _rewrite_loaded_weights(rewrite)


def fnuz_read_as_ocp():
    """FP8 weights converted to FNUZ (codes kept, scales doubled) and then decoded as OCP e4m3fn."""

    def rewrite(name: str, w: QuantizedWeight) -> QuantizedWeight | None:
        if w.layout is not WeightLayout.FP8_BLOCK:
            return None
        codes, scales = fp8_ocp_to_fnuz(w.codes, w.scales)
        return _with(w, codes=codes, scales=scales, fmt=E4M3FN)

    return _rewrite_loaded_weights(rewrite)


def token_interleaved_cache_reader():
    """fp8_ds_mla caches read as if each token's 584 bytes were contiguous (the field-notes §3 bug)."""
    original = PagedKVCache.read

    def read(self: PagedKVCache, slots: torch.Tensor) -> torch.Tensor:
        if self.mode is not KVCacheMode.FP8_DS_MLA:
            return original(self, slots)
        slots = torch.as_tensor(slots, dtype=torch.int64, device=self.device)
        flat = slots.reshape(-1)
        keep = flat != -1
        entry_bytes = self.codec.data_bytes + self.codec.scale_bytes
        base = (flat[keep] // self.block_size) * self.block_stride_bytes + (flat[keep] % self.block_size) * entry_bytes
        raw = self.buffer[base[:, None] + torch.arange(entry_bytes, device=self.device)]
        out = torch.zeros(flat.numel(), self.head_dim, dtype=torch.float32, device=self.device)
        out[keep] = self.codec.decode(raw[:, : self.codec.data_bytes], raw[:, self.codec.data_bytes:])
        return out.reshape(*slots.shape, self.head_dim)

    return _patched(PagedKVCache, "read", read)


def wrong_swiglu_clamp(alpha: float = 1.702):
    """gpt-oss's SwiGLU (gate·σ(alpha·gate)·(up + 1), both clamped) instead of V4's silu(gate)·up."""

    def swiglu(gate: torch.Tensor, up: torch.Tensor, limit: float) -> torch.Tensor:
        gate, up = gate.double().clamp(max=limit), up.double().clamp(min=-limit, max=limit)
        return (gate * F.sigmoid(alpha * gate) * (up + 1)).float()

    return _patched(moe_reference, "swiglu_clamped", swiglu)


def nan_in_layer(layer: int = 3):
    """Layer `layer`'s attention output gets a NaN in channel 0 of every row."""
    original = deepseek_v4.attention_forward

    def attention_forward(x, batch, w, ctx, caches, state, observer=None):
        out = original(x, batch, w, ctx, caches, state, observer)
        if ctx.layer_id == layer:
            out = out.clone()
            out[:, 0] = float("nan")
        return out

    return _patched(deepseek_v4, "attention_forward", attention_forward)


def decode_position_off_by_one():
    """Single-token chunks after position 0 (decode steps) run at position p - 1."""
    original = ForwardBatch.__dict__["from_chunks"].__func__

    def from_chunks(cls, token_chunks, seq_ids, start_positions, **kwargs):
        shifted = [s - 1 if len(t) == 1 and s > 0 else s for t, s in zip(token_chunks, start_positions, strict=True)]
        return original(cls, token_chunks, seq_ids, shifted, **kwargs)

    return _patched(ForwardBatch, "from_chunks", classmethod(from_chunks))


FAULTS: dict[str, Callable[[], contextlib.AbstractContextManager]] = {
    "corrupt_scale_bytes": corrupt_scale_bytes,
    "token_interleaved_cache_reader": token_interleaved_cache_reader,
    "swapped_e2m1_nibbles": swapped_e2m1_nibbles,
    "fnuz_read_as_ocp": fnuz_read_as_ocp,
    "wrong_swiglu_clamp": wrong_swiglu_clamp,
    "nan_in_layer": nan_in_layer,
    "decode_position_off_by_one": decode_position_off_by_one,
}
