"""Decode lookahead: the next decode step runs on the device while the host finishes this one.

Why (session 7, H200): a 64-request decode step of the default model took 3.7 ms of wall time
for 1.55 ms of device work, and a one-request step 2.05 ms for 0.95 ms. The rest is host work
done while the GPU idles: reading the sampled tokens, the scheduler's bookkeeping, detokenizing,
building the next batch. The next step needs the tokens just sampled, but only on the device: so
right after sampling step N the runner replays step N + 1's graph for the same requests with
those tokens copied device to device into its input buffer, then reads step N's tokens (through
a pinned buffer and an event, so the read does not wait for the step behind it). The engine's
host work then overlaps the device's step N + 1.

When the scheduler's step N + 1 is exactly the step that was launched (same requests in the
same order, one token each at the next position, the same token and the same table views), the
runner takes its logits instead of replaying; otherwise it drops them and runs the step as
scheduled. Dropping is safe because the lookahead wrote only what step N + 1 would write: a
decode step rewrites the same bytes to the same slots for the same (sequence, position, token),
and a request that finished or was preempted owns its pages until after the lookahead ran in
stream order (anything that reuses them is enqueued later, and writes before it reads).

The lookahead launches only when the step can be predicted and replayed: a graph decode step
where every row sampled one token, no logprobs were asked for, no request reaches max_tokens or
the model's length at this step, and every row's tables already cover its next position (the
scheduler would otherwise grow them, and a new table view is a new step). The rest runs as
before. `MXSERVE_DECODE_LOOKAHEAD=0` turns it off.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from mxserve.engine.scheduler_output import SchedulerOutput

OFF_SWITCH = "MXSERVE_DECODE_LOOKAHEAD"


def lookahead_enabled() -> bool:
    return os.environ.get(OFF_SWITCH, "1") != "0"


@dataclass
class LookaheadStats:
    launched: int = 0  # lookahead steps replayed
    used: int = 0  # ... whose logits the next step took
    dropped: int = 0  # ... that the next step did not match (run again as scheduled)


@dataclass
class Lookahead:
    """One launched step: rows are `request_ids` at `positions`, fed `token_ids` (known to the
    host once it has read the previous step's tokens), built from the table views `tables`."""

    request_ids: tuple[str, ...]
    positions: tuple[int, ...]
    tables: tuple[Mapping[str, tuple[int, ...]], ...]
    logits: torch.Tensor  # [n, vocab]: the replay's output rows (the graph's static buffer)
    bucket: int  # the graph bucket it replayed
    token_ids: tuple[int, ...] = ()

    def matches(self, step: SchedulerOutput) -> bool:
        """Whether `step` is exactly the launched step (so its logits are the step's logits)."""
        chunks = step.chunks
        if len(chunks) != len(self.request_ids) or len(self.token_ids) != len(chunks):
            return False
        return all(
            c.request_id == rid and c.num_tokens == 1 and c.num_draft_tokens == 0 and not c.is_new
            and c.start_pos == pos and c.token_ids[0] == tok and c.block_tables is tables
            for c, rid, pos, tok, tables in zip(chunks, self.request_ids, self.positions, self.token_ids,
                                                self.tables, strict=True))


def next_positions_covered(tables: Sequence[Mapping[str, tuple[int, ...]]], next_positions: Sequence[int],
                           block_size: int, positions_per_unit: Mapping[str, int]) -> bool:
    """Whether every row's tables already hold a page for its next position in every pool
    (`positions_per_unit`: pool name → positions one cache unit stands for). Runs every decode step
    over rows x pools, so plain integer work only."""
    for row_tables, position in zip(tables, next_positions, strict=True):
        length = position + 1
        for pool, pages in row_tables.items():
            if length // positions_per_unit[pool] > len(pages) * block_size:
                return False
    return True
