"""The draft lookahead of the graphed speculative step (`MXSERVE_SPEC_LOOKAHEAD=1`; off by default:
on the H200 it gives the same tokens and acceptances but measured no faster, docs/benchmarks.md
session 10).

When every request is greedy, the verify graph also computes the rejected rows on the device (a
row is rejected once a draft before or at it differs from the target's argmax of the row before;
`SpecStepGraphs(device_verdicts=True)`), so the post graph and the NEXT step's draft are launched
before the host reads the step's tokens. The next draft's anchor is the target's token after the
accepted drafts, at position q + accepted + 1, read through the page tables the verify staged: the
draft's own were staged when it last ran from the host, maybe steps before, and a request may have
gained a window page since (the bug session 10's first GPU call found). The host still verifies and
raises if its rejected rows differ from the device's; the next step takes the launched draft only
when its requests, anchors and positions are exactly the ones the host's verdicts predict.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from mxserve.engine.speculative.step_graphs import _DraftEntry, _VerifyEntry


class DraftLookahead:
    """A draft launched ahead, from `launch` through `expect` (the host's prediction) to `take`."""

    def __init__(self) -> None:
        self._launched: _DraftEntry | None = None  # until `expect` names what it was computed for
        self._expected: tuple[tuple, tuple, tuple, _DraftEntry] | None = None  # (ids, anchors, positions, entry)
        self.num_used = 0  # steps that took the draft launched ahead (evidence)

    def launch(self, verified: _VerifyEntry, draft: _DraftEntry, num_requests: int,
               replay: Callable[[_DraftEntry], None]) -> None:
        """Rewrite the inputs of `draft` (the last step's draft entry, `num_requests` requests) from
        the device verdicts of `verified` and replay it; queued behind the post graph."""
        n, meta = num_requests, verified.meta
        rows = verified.staged.static.num_rows
        is_draft = meta[0] != torch.arange(rows, device=meta.device)
        accepted = torch.zeros(rows, dtype=torch.int64, device=meta.device)
        accepted.index_add_(0, meta[1], (is_draft & ~verified.rejected).to(torch.int64))
        static = draft.staged.static
        static.token_ids[:n] = verified.choice[meta[2, :n] + accepted[:n]]
        static.positions[:n] += accepted[:n] + 1
        # each request's current tables: the verify's first row of request b is meta[2, b]
        for pool, table in static.block_tables.items():
            table[:n] = verified.staged.static.block_tables[pool][meta[2, :n]]
        replay(draft)
        self._launched = draft

    def expect(self, seq_ids: Sequence[Hashable], anchors: Sequence[int], positions: Sequence[int]) -> None:
        """What the launched draft was computed for, by the host's verdicts."""
        entry, self._launched = self._launched, None
        if entry is not None:
            self._expected = (tuple(seq_ids), tuple(anchors), tuple(positions), entry)

    def take(self, seq_ids: Sequence[Hashable], anchors: Sequence[int], positions: Sequence[int]
             ) -> _DraftEntry | None:
        """The launched draft when the step asks for exactly its inputs, else None (it is dropped)."""
        expected, self._expected = self._expected, None
        if expected is None or expected[:3] != (tuple(seq_ids), tuple(anchors), tuple(positions)):
            return None
        self.num_used += 1
        return expected[3]
