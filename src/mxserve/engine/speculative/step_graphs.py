"""CUDA graphs of the speculative step: the draft, the verify forward, the rollback and commit.

A step of decodes (each chunk is one anchor token with k ≥ 0 drafts; after the prompt,
single-stream speculative decoding is nothing else) runs as three graph replays
and one host read, instead of an eager chunked forward (~100x the device time of the small
default model, almost all of it host overhead):

1. **draft** (bucket of B requests, up to 64): `DSparkDraft.greedy_drafts` over static buffers (anchor
   tokens, anchor positions, window-pool tables) → block tokens [B, K + 1] = anchor, K drafts;
2. **verify** (bucket of R = Σ (k_b + 1) rows, up to 64; 512 opt-in): each row's token copied on
   the device from the draft's output; `RowSnapshot.take` of the slots the rows write;
   `decode_forward_with_aux` with one row per verified position → logits [R, V] and the DSpark capture [R, ·];
3. the runner reads the drafts and the target's choices in one transfer and verifies;
4. **post** (same bucket R): `RowSnapshot.restore` of the rejected rows, then the committed rows'
   DSpark context (`DSparkDraft.write_context`, slot −1 for the rejected rows).

Why the verify rows give plain decoding's bits: a row computes what a one-token decode at its
position computes (the decode path is batch invariant and writes every row's entries before any
row reads them; `DeepseekV4Model.decode_forward_with_aux`). Graphs are captured per bucket on
first use (or ahead of traffic: `prepare`), on all-padding buffers (padding rows have no pages: they write nothing, so capture
and warm-up cannot disturb a cache), after a sync probe as `DecodeGraphs` does; any failure
makes the graphs unavailable with the reason, and the runner goes back to the eager step.
`capture=False` runs the same static-buffer functions without graphs (the CPU tests).

**The draft lookahead** (`draft_lookahead.py`, off by default): with `device_verdicts`, the verify graph
also computes the greedy rejected rows, so the post graph and the next draft can be queued before
the host reads the step's tokens.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from mxserve.engine.cuda_graphs import (
    BUCKETS,
    GraphCapturer,
    GraphUnavailable,
    bucket_for,
    row_buckets_from_env,
)
from mxserve.engine.speculative.draft_lookahead import DraftLookahead
from mxserve.engine.speculative.row_snapshot import RowSnapshot
from mxserve.model.decode_addresses import DecodeAddresses
from mxserve.model.decode_batch import DecodeBatch, DecodeGeometry, build_decode_batch
from mxserve.model.dspark import DraftWindows, DSparkDraft
from mxserve.model.kv_state import ModelCacheState, Pool

logger = logging.getLogger("mxserve.engine")

def verify_buckets_from_env() -> tuple[int, ...]:
    """MXSERVE_SPEC_VERIFY_MAX_ROWS (default 64): the largest bucket of the verify and rollback/commit
    parts (`ROW_BUCKETS`), which caps a step's rows (the scheduler cuts a batch's drafts to fit); 128,
    256 or 512 let larger batches keep their drafts (512: 64 requests x a whole K = 7 block). Only up
    to 64 by default: on the H200 (session 12 call 4) a 512-row verify took 12.5 ms against 3.3 ms at
    64 rows (the decode kernels scale with rows), and 64 requests at K = 7 ran at 4854 tok/s with
    512-row buckets against 10010 with drafts cut to fit 64 rows."""
    return row_buckets_from_env("MXSERVE_SPEC_VERIFY_MAX_ROWS")


@dataclass
class _Staged:
    """A bucket's static device buffers, the pinned host buffers filled each step, and the event
    of the last host → device copy (the host buffers are rewritten only after it)."""

    static: DecodeBatch
    host: DecodeBatch
    copied: torch.cuda.Event | None = None


@dataclass
class _DraftEntry:
    staged: _Staged
    graph: torch.cuda.CUDAGraph | None = None
    block_tokens: torch.Tensor | None = None  # [B, K + 1] int64: anchor, then K drafts


@dataclass
class _VerifyEntry:
    staged: _Staged
    rejected: torch.Tensor  # [R] bool static: the rows the post graph rolls back
    rejected_host: torch.Tensor  # [R] bool (pinned on CUDA)
    # [3, R] int64 static / pinned: per row its request's first row and its request's index; per
    # request b (columns < number of requests) its first row
    meta: torch.Tensor
    meta_host: torch.Tensor
    rejected_copied: torch.cuda.Event | None = None
    meta_copied: torch.cuda.Event | None = None
    graph: torch.cuda.CUDAGraph | None = None
    post_graph: torch.cuda.CUDAGraph | None = None
    logits: torch.Tensor | None = None  # [R, V] fp32
    aux: torch.Tensor | None = None  # [R, len(aux ids)·D]
    choice: torch.Tensor | None = None  # [R] int64 the target's argmax per row
    snapshot: RowSnapshot | None = None
    window_slots: torch.Tensor | None = None  # [R] each row's window slot (the commit's target)


class SpecStepGraphs:
    def __init__(self, model, draft: DSparkDraft, windows: DraftWindows, state: ModelCacheState,
                 geometry: DecodeGeometry, device: torch.device, *, block_width: int, aux_layer_ids: Sequence[int],
                 capture: bool = True, buckets: Sequence[int] = BUCKETS,
                 verify_buckets: Sequence[int] = BUCKETS, warmup_iters: int = 2,
                 device_verdicts: bool = False) -> None:
        """`buckets`: request counts the draft part is captured for; `verify_buckets`: row counts of
        the verify and rollback/commit parts. `device_verdicts`: the verify graph also computes the
        greedy rejected rows (what the draft lookahead needs: `finish_on_device`, `draft_ahead`);
        without it the host's rows are used."""
        self.model, self.draft, self.windows, self.state = model, draft, windows, state
        self.geometry, self.device = geometry, device
        self.block_width = block_width
        self.device_verdicts = device_verdicts
        self.aux_layer_ids = tuple(aux_layer_ids)
        self.capture, self.buckets = capture, tuple(sorted(buckets))
        self.verify_buckets = tuple(sorted(verify_buckets))
        self.unavailable: str | None = None  # set once (never retried); the runner then runs eager
        self.num_steps = 0  # steps that ran here (evidence the graphed path ran)
        self._drafts: dict[int, _DraftEntry] = {}
        self._verifies: dict[int, _VerifyEntry] = {}
        self._last: _VerifyEntry | None = None  # the verify whose rollback/commit is pending
        self._last_draft: tuple[_DraftEntry, int] | None = None  # the last draft's entry and request count
        self._verified: _VerifyEntry | None = None  # the verify `finish_on_device` finished
        self.lookahead = DraftLookahead()
        self._capturer = GraphCapturer(device, warmup_iters=warmup_iters)

    def fits(self, num_requests: int, num_rows: int) -> bool:
        return (bucket_for(num_requests, self.buckets) is not None
                and bucket_for(num_rows, self.verify_buckets) is not None)

    # ------------------------------------------------------------------ the three parts
    def draft_tokens(self, anchors: Sequence[int], seq_ids: Sequence[Hashable], anchor_positions: Sequence[int]
                     ) -> torch.Tensor | None:
        """Block tokens [n, K + 1] (anchor, K greedy drafts) on the device for n requests; None when
        the graphs are unavailable."""
        if self.unavailable is not None:
            return None
        n = len(anchors)
        ahead = self.lookahead.take(seq_ids, anchors, anchor_positions)
        if ahead is not None:
            self._last_draft = (ahead, n)
            return ahead.block_tokens[:n]
        entry = self._draft_entry(bucket_for(n, self.buckets))
        if entry is None:
            return None
        self._stage(entry.staged, anchors, seq_ids, anchor_positions)
        self._replay_draft(entry)
        self._last_draft = (entry, n)
        return entry.block_tokens[:n]

    def verify(self, token_ids: torch.Tensor, seq_ids: Sequence[Hashable], positions: Sequence[int],
               segments: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
        """One row per (sequence, position), tokens [n] on the device, `segments` the rows of each
        request in order (k_b + 1: its anchor, then its drafts) → (logits [n, V], aux [n, ·], the
        target's argmax per row [n]), views of static buffers valid until the next verify. Call
        `finish` or `finish_on_device` before the next step."""
        if self.unavailable is not None:
            return None
        n = len(positions)
        entry = self._verify_entry(bucket_for(n, self.verify_buckets))
        if entry is None:
            return None
        self._stage(entry.staged, [0] * n, seq_ids, positions)
        if self.device_verdicts:
            self._stage_meta(entry, segments)
        entry.staged.static.token_ids[:n].copy_(token_ids, non_blocking=True)
        if entry.graph is not None:
            entry.graph.replay()
        else:
            entry.logits, entry.aux, entry.choice = self._verify_fn(entry)
        self._last = entry
        self.num_steps += 1
        return entry.logits[:n], entry.aux[:n], entry.choice[:n]

    def device_rejected(self, num_rows: int) -> torch.Tensor:
        """The last verify's rejected rows as the device computed them for greedy requests [n] bool."""
        return self._last.rejected[:num_rows]

    def finish_on_device(self) -> None:
        """Roll back / commit the last verify by the rejected rows its graph computed (every request
        greedy): nothing to copy from the host, so it is queued before the host reads the tokens."""
        if not self.device_verdicts:
            raise RuntimeError("SpecStepGraphs.finish_on_device: built without device_verdicts")
        entry, self._last = self._last, None
        self._verified = entry
        if entry.post_graph is not None:
            entry.post_graph.replay()
        else:
            self._post_fn(entry)

    def draft_ahead(self) -> None:
        """Launch the next step's draft for the last verify's requests (after `finish_on_device`;
        `draft_lookahead.py`). `expect_ahead` then names what the host predicts."""
        entry, n = self._last_draft
        self.lookahead.launch(self._verified, entry, n, self._replay_draft)

    def expect_ahead(self, seq_ids: Sequence[Hashable], anchors: Sequence[int], positions: Sequence[int]) -> None:
        """The next `draft_tokens` with exactly these inputs takes the draft launched ahead."""
        self.lookahead.expect(seq_ids, anchors, positions)

    @property
    def num_ahead_used(self) -> int:
        return self.lookahead.num_used

    def finish(self, rejected: Sequence[bool]) -> None:
        """Roll back the last verify's `rejected` rows (one flag per row, in its row order) and write
        the DSpark context of the others."""
        entry, self._last = self._last, None
        if entry is None:
            raise RuntimeError("SpecStepGraphs.finish: no verify to finish")
        if entry.rejected_copied is not None:
            entry.rejected_copied.synchronize()
        host = entry.rejected_host
        host.fill_(True)
        host[: len(rejected)] = torch.tensor(list(rejected), dtype=torch.bool)
        entry.rejected.copy_(host, non_blocking=True)
        if self.device.type == "cuda":
            entry.rejected_copied = torch.cuda.Event()
            entry.rejected_copied.record()
        if entry.post_graph is not None:
            entry.post_graph.replay()
        else:
            self._post_fn(entry)

    # ------------------------------------------------------------------ what the graphs run
    def _draft_fn(self, entry: _DraftEntry) -> torch.Tensor:
        s = entry.staged.static
        drafts = self.draft.greedy_drafts(self.windows, s.token_ids, s.positions, s.block_tables[Pool.WINDOW],
                                          self.geometry.block_size, self.block_width)
        return torch.cat((s.token_ids[:, None], drafts), dim=1)

    def _verify_fn(self, entry: _VerifyEntry) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        static = entry.staged.static
        addresses = DecodeAddresses(static, self.geometry, self.model.config)
        entry.snapshot = RowSnapshot.take(self.state, addresses)
        entry.window_slots = addresses.window_write()
        logits, aux = self.model.decode_forward_with_aux(static, self.state, self.geometry, self.aux_layer_ids,
                                                         addresses=addresses)
        choice = torch.argmax(logits, dim=-1)
        if not self.device_verdicts:
            return logits, aux, choice
        # greedy verification on the device: a draft row matches when its token is the target's
        # argmax of the row before; a row is rejected once any row of its request up to it does not
        # (a padding row is its own request's first row: never rejected, and it has no slots)
        rows = torch.arange(static.num_rows, device=logits.device)
        first = entry.meta[0]
        mismatch = (rows != first) & (static.token_ids != choice[(rows - 1).clamp(min=0)])
        count = torch.cumsum(mismatch.to(torch.int32), dim=0)
        entry.rejected.copy_(count - count[first] > 0)
        return logits, aux, choice

    def _post_fn(self, entry: _VerifyEntry) -> None:
        entry.snapshot.restore(entry.rejected)
        committed_slots = torch.where(entry.rejected, -1, entry.window_slots)
        self.draft.write_context(self.windows, entry.aux, entry.staged.static.positions, committed_slots)

    def _replay_draft(self, entry: _DraftEntry) -> None:
        if entry.graph is not None:
            entry.graph.replay()
        else:
            entry.block_tokens = self._draft_fn(entry)

    # ------------------------------------------------------------------ staging and capture
    def prepare(self, *, draft_buckets: Sequence[int], verify_buckets: Sequence[int]) -> bool:
        """Capture these buckets ahead of traffic (`LLMEngine.capture_graphs`): the draft part per
        request bucket, the verify and rollback/commit parts per row bucket. False, with
        `unavailable` set, when a part cannot be graphed."""
        return (all(self._draft_entry(b) is not None for b in draft_buckets)
                and all(self._verify_entry(b) is not None for b in verify_buckets))

    def captured_buckets(self) -> dict[str, tuple[int, ...]]:
        """Part → buckets captured (empty without capture)."""
        if not self.capture:
            return {}
        return {"draft": tuple(sorted(self._drafts)), "verify": tuple(sorted(self._verifies))}

    def _draft_entry(self, bucket: int) -> _DraftEntry | None:
        """`bucket`'s draft part, captured on first use; None when graphs are unavailable."""
        if self.unavailable is not None:
            return None
        entry = self._drafts.get(bucket)
        if entry is None:
            entry = _DraftEntry(self._new_staged(bucket))
            if not self._prepare(lambda: self._capture_draft(entry)):
                return None
            self._drafts[bucket] = entry
        return entry

    def _verify_entry(self, bucket: int) -> _VerifyEntry | None:
        """`bucket`'s verify and rollback/commit parts, captured on first use; None when graphs are
        unavailable."""
        if self.unavailable is not None:
            return None
        entry = self._verifies.get(bucket)
        if entry is None:
            staged = self._new_staged(bucket)
            pin = self.device.type == "cuda"
            entry = _VerifyEntry(staged, torch.ones(bucket, dtype=torch.bool, device=self.device),
                                 torch.ones(bucket, dtype=torch.bool, pin_memory=pin),
                                 _padding_meta(bucket, self.device), _padding_meta(bucket, "cpu").pin_memory()
                                 if pin else _padding_meta(bucket, "cpu"))
            if not self._prepare(lambda: self._capture_verify(entry)):
                return None
            self._verifies[bucket] = entry
        return entry

    def _stage_meta(self, entry: _VerifyEntry, segments: Sequence[int]) -> None:
        if entry.meta_copied is not None:
            entry.meta_copied.synchronize()
        host = entry.meta_host.numpy()
        host[0] = np.arange(host.shape[1])
        host[1:] = 0
        row = 0
        for b, count in enumerate(segments):
            host[0, row: row + count] = row
            host[1, row: row + count] = b
            host[2, b] = row
            row += count
        entry.meta.copy_(entry.meta_host, non_blocking=True)
        if self.device.type == "cuda":
            entry.meta_copied = torch.cuda.Event()
            entry.meta_copied.record()

    def _new_staged(self, bucket: int) -> _Staged:
        pin = self.device.type == "cuda"
        return _Staged(DecodeBatch.empty(bucket, self.geometry, device=self.device),
                       DecodeBatch.empty(bucket, self.geometry, pin_memory=pin))

    def _stage(self, staged: _Staged, token_ids: Sequence[int], seq_ids: Sequence[Hashable],
               positions: Sequence[int]) -> None:
        if staged.copied is not None:
            staged.copied.synchronize()
        build_decode_batch(token_ids, seq_ids, positions, self.state, self.geometry, num_rows=staged.static.num_rows,
                           out=staged.host)
        staged.static.copy_(staged.host)
        if self.device.type == "cuda":
            staged.copied = torch.cuda.Event()
            staged.copied.record()

    def _prepare(self, capture: Callable[[], None]) -> bool:
        """Capture a fresh bucket (nothing to do without graphs); False, with `unavailable` set, when
        it cannot be."""
        if not self.capture:
            return True
        try:
            capture()
        except GraphUnavailable as e:
            self.unavailable = str(e)
            logger.info("speculative step graphs unavailable, steps run eager: %s", e)
            return False
        return True

    def _capture_draft(self, entry: _DraftEntry) -> None:
        entry.graph, entry.block_tokens = self._graph(lambda: self._draft_fn(entry), "draft")

    def _capture_verify(self, entry: _VerifyEntry) -> None:
        entry.graph, (entry.logits, entry.aux, entry.choice) = self._graph(lambda: self._verify_fn(entry), "verify")
        # A capture computes nothing: replay once so the slot lists the post graph reads (the
        # snapshot's, the window's) hold the padding rows' −1 before it runs eagerly to be probed.
        entry.graph.replay()
        entry.post_graph, _ = self._graph(lambda: self._post_fn(entry), "rollback/commit")

    def _graph(self, fn: Callable[[], object], name: str) -> tuple[torch.cuda.CUDAGraph, object]:
        """`fn` probed, warmed up and captured (`GraphCapturer`): (graph, its outputs). The buffers it
        runs on hold padding rows only (nothing is written)."""
        graph, out = self._capturer.capture(fn, f"{name} part")
        logger.info("speculative step graphs: captured the %s part", name)
        return graph, out


def _padding_meta(rows: int, device) -> torch.Tensor:
    """`_VerifyEntry.meta` of padding rows only: each row its own request's first row."""
    meta = torch.zeros(3, rows, dtype=torch.int64, device=device)
    meta[0] = torch.arange(rows, device=device)
    return meta
