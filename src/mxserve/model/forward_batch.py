"""The typed input of one model forward: a varlen batch of sequence chunks.

Every sequence contributes one contiguous chunk of tokens at positions [start_pos,
start_pos + num_tokens); positions before start_pos are already in the caches. Prefill,
chunked prefill and decode are all this one shape (spec §4): decode is a chunk of 1.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SequenceChunk:
    seq_id: Hashable  # the sequence's key in the cache block tables (the engine uses request ids)
    start_pos: int  # absolute position of the chunk's first token
    num_tokens: int  # tokens in this chunk (>= 1)
    token_offset: int  # first row of this chunk in the flattened batch

    @property
    def end_pos(self) -> int:  # one past the last position
        return self.start_pos + self.num_tokens


@dataclass(frozen=True)
class ForwardBatch:
    token_ids: torch.Tensor  # [T] int64, all chunks concatenated in order
    positions: torch.Tensor  # [T] int64 absolute positions
    chunks: tuple[SequenceChunk, ...]  # one per sequence in this step
    logits_rows: torch.Tensor | None = None  # [L] rows of T that need logits; None = every row

    @classmethod
    def from_chunks(
        cls, token_chunks: list[list[int]], seq_ids: Sequence[Hashable], start_positions: list[int],
        *, logits_for: str | Sequence[int] = "all", device: torch.device | str = "cpu",
    ) -> ForwardBatch:
        """Build a batch from per-sequence token lists.

        logits_for: "all" rows, "last" row of every chunk, or explicit flattened row indices.
        """
        if not (len(token_chunks) == len(seq_ids) == len(start_positions)):
            raise ValueError("from_chunks: token_chunks, seq_ids and start_positions differ in length")
        chunks, ids, positions, last_rows = [], [], [], []
        offset = 0
        for tokens, seq, start in zip(token_chunks, seq_ids, start_positions, strict=True):
            if not tokens:
                raise ValueError(f"from_chunks: sequence {seq} has an empty chunk")
            chunks.append(SequenceChunk(seq, start, len(tokens), offset))
            ids.extend(tokens)
            positions.extend(range(start, start + len(tokens)))
            offset += len(tokens)
            last_rows.append(offset - 1)
        if isinstance(logits_for, str):
            if logits_for not in ("all", "last"):
                raise ValueError(f"from_chunks: logits_for={logits_for!r} is not 'all', 'last' or a row list")
            rows = None if logits_for == "all" else torch.tensor(last_rows, dtype=torch.int64, device=device)
        else:
            rows = torch.tensor(list(logits_for), dtype=torch.int64, device=device)
        return cls(
            torch.tensor(ids, dtype=torch.int64, device=device),
            torch.tensor(positions, dtype=torch.int64, device=device),
            tuple(chunks),
            rows,
        )

    @property
    def num_tokens(self) -> int:
        return int(self.token_ids.shape[0])
