"""Cutting one rank's shards out of a memory-mapped checkpoint, and counting their bytes.

`slice_weight` cuts a `QuantizedWeight` (FP8 128x128 blocks or MXFP4 1x32 groups) or a plain
tensor along rows and/or columns, taking the matching scale rows/columns, so the shard is a
self-contained weight whose codes and scales are exactly the full weight's (a boundary inside a
scale block raises ValueError). Row slices of the checkpoint's memory map are views: pages the
rank does not use are never read. Column slices are copied (`contiguous`), which costs only the
shard's own bytes: no rank ever holds a full copy of a split weight.

`load_rank_weights` walks the checkpoint inventory and returns what `DeepseekV4Model` binds, the
rank's shards in place of the full weights; routed experts another rank owns become empty
placeholders (never called). MTP / DSpark weights are not loaded (the main model does not use them).
"""

from __future__ import annotations

import math

import torch

from mxserve.distributed.plan import Shard, ShardingPlan
from mxserve.formats import QuantizedWeight
from mxserve.formats.quantized_weight import WeightLayout
from mxserve.kernels.linear import Weight
from mxserve.model.checkpoint import CheckpointReader
from mxserve.model.checkpoint.inventory import MXFP4_GROUP, Inventory, ReleaseFormat

_MAIN_MODEL_ONLY = ("mtp.",)  # prefixes the main model never binds


def _scale_span(span: tuple[int, int], extent: int, block: int, what: str) -> tuple[int, int]:
    start, stop = span
    if start % block or (stop % block and stop != extent):
        raise ValueError(f"{what} [{start}, {stop}) of {extent} does not sit on {block}-wide scale blocks")
    return start // block, math.ceil(stop / block)


def slice_weight(weight: Weight, shard: Shard) -> Weight:
    """The part of `weight` [out, in] (or a 1-D tensor) that `shard` names, as a standalone weight."""
    if shard.is_full:
        return weight
    if isinstance(weight, QuantizedWeight):
        return _slice_quantized(weight, shard)
    if not isinstance(weight, torch.Tensor):
        raise TypeError(f"slice_weight: cannot slice a {type(weight).__name__}")
    out = weight
    if shard.rows is not None:
        out = out[shard.rows[0] : shard.rows[1]]
    if shard.cols is not None:
        out = out[:, shard.cols[0] : shard.cols[1]].contiguous()
    return out


def _slice_quantized(w: QuantizedWeight, shard: Shard) -> QuantizedWeight:
    if len(w.shape) != 2:
        raise ValueError(f"slice_weight: only 2-D quantized weights are split, got {w.shape=}")
    out_features, in_features = w.shape
    rows = shard.rows or (0, out_features)
    cols = shard.cols or (0, in_features)
    codes, scales = w.codes, w.scales
    if w.layout is WeightLayout.FP8_BLOCK:
        bo, bi = w.block
        r0, r1 = _scale_span(rows, out_features, bo, "rows")
        c0, c1 = _scale_span(cols, in_features, bi, "columns")
        codes = codes[rows[0] : rows[1], cols[0] : cols[1]]
        scales = scales[r0:r1, c0:c1]
    else:  # MXFP4: one scale per row and 32 columns, two codes per byte
        c0, c1 = _scale_span(cols, in_features, MXFP4_GROUP, "columns")
        codes = codes[rows[0] : rows[1], cols[0] // 2 : math.ceil(cols[1] / 2)]
        scales = scales[rows[0] : rows[1], c0:c1]
    if shard.cols is not None:
        codes, scales = codes.contiguous(), scales.contiguous()
    if w.layout is WeightLayout.FP8_BLOCK:
        return QuantizedWeight.from_fp8_block(codes, scales, block=w.block, fmt=w.fmt)
    return QuantizedWeight.from_mxfp4(codes, scales, num_cols=cols[1] - cols[0])


def _absent_placeholder(in_features: int) -> torch.Tensor:
    # An expert owned by another rank: bound by the model like every expert, never multiplied.
    return torch.empty(0, in_features, dtype=torch.bfloat16)


def load_rank_weights(reader: CheckpointReader, plan: ShardingPlan, rank: int) -> dict[str, Weight]:
    """The rank's weights keyed as `CheckpointReader.load()` keys them (linear prefix / tensor name)."""
    out: dict[str, Weight] = {}
    for prefix, spec in reader.inventory.linears.items():
        if prefix.startswith(_MAIN_MODEL_ONLY):
            continue
        shard = plan.shard(prefix, rank)
        out[prefix] = _absent_placeholder(spec.in_features) if shard is None else slice_weight(
            reader.load_linear(prefix), shard)
    for name in reader.inventory.tensors:
        if name.startswith(_MAIN_MODEL_ONLY):
            continue
        shard = plan.shard(name, rank)
        out[name] = slice_weight(reader.load_tensor(name), shard)  # plain tensors are never ABSENT
    return out


def weight_nbytes(weights: dict[str, Weight]) -> int:
    """Bytes the rank's weights hold as loaded (packed codes + scales; plain tensors)."""
    total = 0
    for w in weights.values():
        total += w.nbytes if isinstance(w, QuantizedWeight) else w.numel() * w.element_size()
    return total


def linear_shard_nbytes(spec, shard) -> int:
    """Stored bytes of one rank's shard of a linear in its release format (codes + scales; BF16 2 B)."""
    r0, r1 = shard.rows or (0, spec.out_features)
    c0, c1 = shard.cols or (0, spec.in_features)
    rows, cols = r1 - r0, c1 - c0
    if spec.release_format is ReleaseFormat.FP8_BLOCK:
        return rows * cols + math.ceil(rows / spec.block[0]) * math.ceil(cols / spec.block[1])
    if spec.release_format is ReleaseFormat.MXFP4:
        return rows * math.ceil(cols / 2) + rows * math.ceil(cols / MXFP4_GROUP)
    return rows * cols * 2


def planned_rank_nbytes(inventory: Inventory, plan: ShardingPlan, rank: int) -> int:
    """`weight_nbytes(load_rank_weights(...))` from the config alone (no checkpoint needed), for the
    release formats: lets a user see the per-rank share of a model too large to load here."""
    total = 0
    for prefix, spec in inventory.linears.items():
        if prefix.startswith(_MAIN_MODEL_ONLY):
            continue
        shard = plan.shard(prefix, rank)
        if shard is not None:
            total += linear_shard_nbytes(spec, shard)
    element = {"BF16": 2, "F32": 4, "I64": 8}
    for name, tensor in inventory.tensors.items():
        if name.startswith(_MAIN_MODEL_ONLY):
            continue
        shard = plan.shard(name, rank)
        numel = math.prod(tensor.shape)
        if shard is not None and shard.rows is not None:
            numel = numel // tensor.shape[0] * (shard.rows[1] - shard.rows[0])
        total += numel * element[tensor.dtype]
    return total
