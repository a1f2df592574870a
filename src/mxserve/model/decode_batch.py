"""The static-shape input of a pure-decode step (every sequence advances by one token).

`ForwardBatch` + `ModelCacheState` describe a step with Python lists (chunks, per-sequence block
tables), which is right for prefill but costs host work and host syncs on every call. A decode
step has a fixed shape once two numbers are fixed, which is what lets it be captured in a CUDA
graph and replayed:

* the batch bucket B (rows; rows past the real batch are padding), and
* the capacity `DecodeGeometry`: `max_positions` (the engine's max_model_len) fixes how many pages
  a sequence can own in each pool (`max_blocks`) and how many compressed entries a token can see
  (HCA candidates, CSA indexer candidates). Candidate sets are sized by that capacity and masked
  per row by the row's own visible count, so no shape depends on the data.

`DecodeBatch` holds device tensors only: token ids, positions and, per pool, the block tables as
a padded [B, max_blocks] table (−1 = no page). Padding rows have all-(−1) tables, so every slot
they compute is −1: they write nothing and read nothing (reads of −1 return zeros), and rows
never mix (every op of the decode forward is row-independent).

`build_decode_batch` is the host side (outside any graph): it grows or checks the tables
(`ensure_capacity`), validates everything a device check would otherwise have to sync for
(token ids in range, positions below the capacity, page ids in range), and fills pinned host
buffers that can be copied into static device buffers without a synchronisation.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from mxserve.config import ModelConfig
from mxserve.kernels.paged_slots import paged_slots as paged_slots_kernel
from mxserve.model.kv_state import ModelCacheState, Pool, units_for


@dataclass(frozen=True)
class DecodeGeometry:
    """The static capacity of the decode path (one per engine; graphs are captured against it)."""

    block_size: int  # tokens (or entries) per cache page, the cache state's
    max_positions: int  # a sequence's positions lie in [0, max_positions) (the engine's max_model_len)
    max_blocks: Mapping[Pool, int]  # pages per sequence per pool: the width of the padded tables
    hca_candidates: int  # compressed entries an HCA token can see at most (max_positions // ratio)
    indexer_candidates: int  # CSA entries the indexer scores at most (max_positions // ratio)

    @classmethod
    def for_positions(cls, config: ModelConfig, block_size: int, max_positions: int) -> DecodeGeometry:
        if block_size <= 0 or max_positions <= 0:
            raise ValueError(f"DecodeGeometry: {block_size=} and {max_positions=} must be positive")
        blocks = {pool: max(1, -(-units_for(config, pool, max_positions) // block_size)) for pool in Pool}
        return cls(block_size, max_positions, blocks, units_for(config, Pool.HCA, max_positions),
                   units_for(config, Pool.CSA, max_positions))


_ALIGN = 16  # int64 elements (128 bytes) each view of `DecodeBatch.storage` starts on



@dataclass(frozen=True)
class DecodeBatch:
    token_ids: torch.Tensor  # [B] int64 (padding rows: 0)
    positions: torch.Tensor  # [B] int64 absolute position of each row's token (padding rows: 0)
    block_tables: Mapping[Pool, torch.Tensor]  # pool → [B, max_blocks[pool]] int64 page ids, −1 = none
    # [total] int64: the one allocation the tensors above are contiguous views of (`empty` builds
    # batches so), or None. Two batches with equal layouts copy in one transfer.
    storage: torch.Tensor | None = None
    # Reused host buffers (`build_decode_batch(out=...)`, engine-owned tables): per pool, the table
    # list last written into each row (None: padding). A row is rewritten only when its list is
    # another object: the engine installs a new list whenever a table changes and never edits one
    # in place (`ModelCacheState.set_block_tables`), so the same object means the same pages. Why:
    # padding every row's table to the capacity width from Python lists was the largest host cost
    # of a 64-row decode step (~1 ms at max_model_len 4096 under cProfile, session 7).
    rows_written: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def num_rows(self) -> int:
        return int(self.token_ids.shape[0])

    def copy_(self, other: DecodeBatch) -> None:
        """Copy `other` (same shapes, e.g. pinned host buffers) into these tensors, asynchronously
        (the static buffers of a captured graph): one copy when both come from `empty` with the
        same shapes (one host-to-device transfer a step instead of 2 + one per pool)."""
        if (self.storage is not None and other.storage is not None and self.storage.shape == other.storage.shape
                and self.num_rows == other.num_rows):
            self.storage.copy_(other.storage, non_blocking=True)
            return
        self.token_ids.copy_(other.token_ids, non_blocking=True)
        self.positions.copy_(other.positions, non_blocking=True)
        for pool, table in self.block_tables.items():
            table.copy_(other.block_tables[pool], non_blocking=True)

    @classmethod
    def empty(cls, num_rows: int, geometry: DecodeGeometry, *, device: torch.device | str = "cpu",
              pin_memory: bool = False) -> DecodeBatch:
        """A batch of padding rows (what static buffers start as): token ids, positions and each
        pool's table are contiguous views of one allocation, each starting 128-byte aligned."""
        shapes = [(num_rows,), (num_rows,)] + [(num_rows, geometry.max_blocks[pool]) for pool in Pool]
        fills = [0, 0] + [-1] * len(Pool)
        sizes = [math.prod(shape) for shape in shapes]
        starts = [sum(-(-size // _ALIGN) * _ALIGN for size in sizes[:i]) for i in range(len(sizes))]
        total = starts[-1] + -(-sizes[-1] // _ALIGN) * _ALIGN
        storage = torch.empty(total, dtype=torch.int64, device=device, pin_memory=pin_memory)
        views = []
        for shape, fill, size, start in zip(shapes, fills, sizes, starts, strict=True):
            view = storage[start : start + size].view(shape)
            view.fill_(fill)
            views.append(view)
        storage[starts[-1] + sizes[-1]:].fill_(0)  # alignment tail: defined bytes in every copy
        for start, size, next_start in zip(starts, sizes, starts[1:], strict=False):
            storage[start + size : next_start].fill_(0)
        return cls(views[0], views[1], dict(zip(Pool, views[2:], strict=True)), storage)


def build_decode_batch(
    token_ids: Sequence[int], seq_ids: Sequence[Hashable], positions: Sequence[int], state: ModelCacheState,
    geometry: DecodeGeometry, *, num_rows: int, out: DecodeBatch | None = None,
) -> DecodeBatch:
    """Host side of a decode step: rows 0..n-1 are the sequences (one token each), n..num_rows-1
    padding. Grows (self-managed) or checks (engine-owned) each sequence's tables first.

    `out`: host buffers to fill (e.g. pinned, reused every step); a fresh CPU batch otherwise.
    Raises ValueError for a token id out of the vocabulary, a position at or past the capacity,
    more rows than `num_rows`, a table wider than the capacity or a page id out of its pool;
    `CacheCapacityError` (from `ModelCacheState.ensure_capacity`) for a table that does not cover
    its row's position."""
    n = len(token_ids)
    if not n == len(seq_ids) == len(positions):
        raise ValueError(f"build_decode_batch: {n} tokens, {len(seq_ids)} sequences, {len(positions)} positions")
    if n > num_rows:
        raise ValueError(f"build_decode_batch: {n} sequences do not fit {num_rows} rows")
    if state.block_size != geometry.block_size:
        raise ValueError(f"build_decode_batch: cache block size {state.block_size} != geometry {geometry.block_size}")
    vocab = state.config.vocab_size
    # min/max run in C; the loop that names the first bad row runs only when one is bad
    if n and (min(token_ids) < 0 or max(token_ids) >= vocab or min(positions) < 0
              or max(positions) >= geometry.max_positions):
        for tok, pos in zip(token_ids, positions, strict=True):
            if not 0 <= tok < vocab:
                raise ValueError(f"build_decode_batch: token id {tok} is not in [0, {vocab})")
            if not 0 <= pos < geometry.max_positions:
                raise ValueError(f"build_decode_batch: position {pos} is not in [0, {geometry.max_positions}) "
                                 "(the decode capacity)")
    if state.manage_tables:
        for seq, pos in zip(seq_ids, positions, strict=True):
            state.ensure_capacity(seq, pos + 1)
    batch = out if out is not None else DecodeBatch.empty(num_rows, geometry)
    if batch.num_rows != num_rows:
        raise ValueError(f"build_decode_batch: buffers have {batch.num_rows} rows, asked for {num_rows}")
    # The host buffers are filled through numpy views: a numpy array from nested lists converts
    # ints ~6x faster than torch.tensor(list) does, and numpy's small ops cost ~1 us against torch's
    # ~5-10 us (64 rows: 0.74 -> 0.29 ms of CPU time on this box, 1 row unchanged at 0.11 ms).
    token_np, position_np = batch.token_ids.numpy(), batch.positions.numpy()
    token_np[n:] = 0
    position_np[n:] = 0
    token_np[:n] = token_ids
    position_np[:n] = positions
    ends = position_np[:n] + 1
    missing: list[int] = []
    memo = None
    if out is not None and not state.manage_tables:
        memo = batch.rows_written
        if not memo:
            memo.update({pool: [_UNKNOWN] * num_rows for pool in Pool})
    for pool in Pool:
        table_np = batch.block_tables[pool].numpy()
        written = memo[pool] if memo is not None else None
        if written is None:
            table_np[n:] = -1
        else:
            for i in range(n, num_rows):
                if written[i] is not None:
                    table_np[i] = -1
                    written[i] = None
        if not n:
            continue
        width, num_pages = geometry.max_blocks[pool], state.num_blocks[pool]
        tables = state.block_tables[pool]
        rows = [tables.get(seq, missing) for seq in seq_ids]
        lengths = np.fromiter(map(len, rows), dtype=np.int64, count=n)
        if lengths.max() > width:
            _raise_first_bad_row(seq_ids, positions, state, geometry)
        # engine-owned tables must cover the row's position (self-managed ones were grown above)
        if not state.manage_tables and (lengths * state.block_size < units_for(state.config, pool, ends)).any():
            _raise_first_bad_row(seq_ids, positions, state, geometry)
        changed = range(n) if written is None else [i for i in range(n) if written[i] is not rows[i]]
        if not changed:
            continue
        pad = [-1] * width
        padded = np.array([rows[i] + pad[len(rows[i]):] for i in changed], dtype=np.int64)
        is_page = np.arange(width) < lengths[list(changed)][:, None]
        if (((padded < 0) | (padded >= num_pages)) & is_page).any():
            _raise_first_bad_row(seq_ids, positions, state, geometry)
        if written is None:
            table_np[:n] = padded
        else:
            table_np[changed] = padded
            for i in changed:
                written[i] = rows[i]
    return batch


_UNKNOWN = object()  # a row of a reused buffer not written through the memo yet: always rewritten


def _raise_first_bad_row(seq_ids: Sequence[Hashable], positions: Sequence[int], state: ModelCacheState,
                         geometry: DecodeGeometry) -> None:
    """Raise the error of the first bad (pool, row), as the per-row checks name it."""
    for seq, pos in zip(seq_ids, positions, strict=True):
        state.ensure_capacity(seq, pos + 1)  # CacheCapacityError for a table that does not cover the row
    for pool in Pool:
        width, num_pages = geometry.max_blocks[pool], state.num_blocks[pool]
        for seq in seq_ids:
            pages = state.block_tables[pool].get(seq, [])
            if len(pages) > width:
                raise ValueError(f"build_decode_batch: sequence {seq!r} has {len(pages)} {pool.value} pages, the "
                                 f"decode capacity is {width}")
            if pages and not (min(pages) >= 0 and max(pages) < num_pages):
                raise ValueError(f"build_decode_batch: sequence {seq!r} {pool.value} page ids {pages} are not in "
                                 f"[0, {num_pages})")
    raise AssertionError("build_decode_batch: a whole-column check failed but no row is bad")


def paged_slots(tables: torch.Tensor, indices: torch.Tensor, block_size: int) -> torch.Tensor:
    """Global cache slots of per-row indices: tables [B, M] page ids (−1 none), indices [B, ...]
    (row b's positions or entry ids) → int64 slots of indices' shape, −1 where the index is
    negative or its page is absent. For real rows this is exactly `ModelCacheState.slots` of the
    row's sequence (the same address rule, spec §8.1), without building a tensor from a list.
    One Triton launch on CUDA (`mxserve.kernels.paged_slots`), the torch twin elsewhere."""
    return paged_slots_kernel(tables, indices, block_size)
