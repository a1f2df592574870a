"""SpeculativeModelRunner: one scheduled step with DSpark drafts, one target forward, verification.

Per step (docs/speculative.md):
1. Drafts. For every decoding chunk with `num_draft_tokens` k > 0, the drafter proposes k tokens
   after the chunk's anchor (its one token, the last sampled one at position q): the DSpark block
   at static width K over the stage windows (context up to q − 1), the Markov loop, greedy or
   probabilistic picks; only the first k are used, so the drafts never depend on the cap.
2. Snapshot: the target cache slots positions q + 1 … q + k may write (`CacheSnapshot`).
3. One target forward over every chunk, verify chunks extended to [anchor, d_0 … d_{k−1}] with
   logits for all k + 1 rows, capturing the hc-mean hiddens DSpark reads (`forward_with_aux`).
4. Verification per request: greedy requests accept while draft == argmax (bit-identical to
   plain decoding); sampled requests use standard rejection or block verification on the
   sampler's processed distributions (lossless either way). Plain chunks sample as usual.
5. Rollback: restore the slots written by rejected positions.
6. Commit: write each stage's context KV for the positions committed this step (whole prefill
   chunks; the anchor and accepted drafts of a verify chunk).

Draws are keyed by (request seed, anchor position, purpose, index): replayable, independent of the
batch, and never reused across steps (block verification consults every acceptance draw, so a
draw reused at a later step would be biased).

A step of decodes (every chunk one token, with or without drafts) runs as CUDA-graph replays
instead (`step_graphs`: draft, verify as one decode row per position, rollback + commit on the
device), with the same verification and the same tokens; a decode without drafts samples with the
sampler's draw, as on the eager step. When prefill chunks join the decodes (continuous batching),
the decodes still replay and only the prefill chunks run eager (`SPLIT_STEP` in `eager_stats`), or,
with `MXSERVE_PREFILL_ROWS=1` (opt-in) and rows to spare, the prefill chunks join the verify as one
committed row per prompt token (no prompt logprobs there). The
scheduler keeps a step's verify rows within the graphs' largest bucket (`max_verify_rows`).

`MXSERVE_SPEC_GRAPHS`: `auto` (default: on CUDA), `0` (every step eager, the switch back), `1` (also
on the CPU, the static buffers without capture: tests). `MXSERVE_SPEC_LOOKAHEAD=1` adds the draft
lookahead (`step_graphs`), off by default (measured no faster on the H200).
`MXSERVE_SPEC_VERIFY_MAX_ROWS` (default 64; up to 512, measured slower) is the largest verify bucket,
which caps a step's rows.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch

from mxserve.config.speculative_config import SpeculativeConfig
from mxserve.engine.cuda_graphs import CaptureReport, buckets_up_to
from mxserve.engine.logprobs import compute_logprobs, gather_logprobs
from mxserve.engine.model_runner import ModelRunner, RequestSampling, StepResult
from mxserve.engine.sampling_params import mix_seed
from mxserve.engine.scheduler_output import RunnerOutput, ScheduledChunk, SchedulerOutput
from mxserve.engine.speculative.metrics import SpecDecodeStats
from mxserve.engine.speculative.probs import processed_probs, sample_from
from mxserve.engine.speculative.rollback import CacheSnapshot
from mxserve.engine.speculative.step_graphs import SpecStepGraphs, verify_buckets_from_env
from mxserve.engine.speculative.verify import Verdict, verify_block, verify_greedy, verify_standard
from mxserve.model.decode_batch import DecodeGeometry
from mxserve.model.deepseek_v4 import DeepseekV4Model
from mxserve.model.dspark import DraftWindows, DSparkDraft
from mxserve.model.forward_batch import ForwardBatch
from mxserve.model.kv_state import ModelCacheState, Pool

DRAW_DRAFT, DRAW_ACCEPT, DRAW_FINAL = 1, 2, 3  # purposes of the keyed draws
# the eager-step reason of a step whose decodes replayed the graphs beside eager prefill chunks
SPLIT_STEP = "speculative step: prefill chunks ran eager beside the graphed decodes"


def step_uniform(seed: int, anchor_position: int, purpose: int, index: int) -> float:
    """A draw in [0, 1) for one (request seed, step, purpose, index); a multiple of 2^-53."""
    key = mix_seed(mix_seed(mix_seed(seed, anchor_position), 7919 * purpose), index)
    return (key >> 11) * 2.0**-53


@dataclass(frozen=True)
class DraftProposal:
    token_ids: tuple[int, ...]  # [k] draft tokens for positions q + 1 … q + k
    probs: torch.Tensor | None  # [k, V] fp64 draft distributions Q_i; None = greedy drafts (one-hot)


# (verify chunks, sampling per request id) → request id → proposal of exactly chunk.num_draft_tokens tokens
Drafter = Callable[[Sequence[ScheduledChunk], Mapping[str, RequestSampling]], dict[str, DraftProposal]]


def spec_lookahead_enabled() -> bool:
    """MXSERVE_SPEC_LOOKAHEAD=1 turns the graphed step's draft lookahead on (`step_graphs`). Off by
    default: on the H200 it gives the same tokens and acceptances but no measurable speed-up
    (session 10, docs/benchmarks.md)."""
    return os.environ.get("MXSERVE_SPEC_LOOKAHEAD", "0") == "1"


class SpeculativeModelRunner(ModelRunner):
    def __init__(self, model: DeepseekV4Model, cache_state: ModelCacheState, device: torch.device, *,
                 draft: DSparkDraft, windows: DraftWindows, config: SpeculativeConfig, block_width: int,
                 max_model_len: int | None = None, enforce_eager: bool = False) -> None:
        """`max_model_len`: the capacity the step graphs are captured against (None: every step eager)."""
        super().__init__(model, cache_state, device)
        if model.config.dspark is None:
            raise ValueError("speculative decoding needs a 0731 checkpoint with a DSpark draft")
        self.draft, self.windows, self.spec_config = draft, windows, config
        self.block_width = block_width  # the static K the draft block always runs at
        self.aux_layer_ids = tuple(model.config.dspark.target_layer_ids)
        self.stats = SpecDecodeStats()
        self.num_restored_entries = 0  # cache entries put back by the eager path's rollbacks
        self.num_rolled_back_positions = 0  # rejected positions whose writes were undone (either path)
        self.drafter: Drafter = self.dspark_drafts  # replaceable (tests inject scripted drafts)
        self.draft_lookahead = spec_lookahead_enabled()  # read once: engines in one process may differ
        self.step_graphs = self._new_step_graphs(max_model_len, enforce_eager)

    @property
    def max_verify_rows(self) -> int:
        """The most rows a graphed step verifies (its largest bucket); 0 without step graphs."""
        return self.step_graphs.verify_buckets[-1] if self.step_graphs is not None else 0

    def _new_step_graphs(self, max_model_len: int | None, enforce_eager: bool) -> SpecStepGraphs | None:
        """The graphed step (module docstring), or None where it is switched off or cannot run."""
        mode = os.environ.get("MXSERVE_SPEC_GRAPHS", "auto")
        if mode not in ("auto", "0", "1"):
            raise ValueError(f"MXSERVE_SPEC_GRAPHS={mode!r}: expected auto, 0 or 1")
        cuda = self.device.type == "cuda"
        wanted = mode == "1" or (mode == "auto" and cuda and not enforce_eager)
        if not wanted or max_model_len is None or not getattr(self.model, "supports_cuda_graphs", False):
            return None
        geometry = DecodeGeometry.for_positions(self.model.config, self.cache_state.block_size, max_model_len)
        return SpecStepGraphs(self.model, self.draft, self.windows, self.cache_state, geometry, self.device,
                              block_width=self.block_width, aux_layer_ids=self.aux_layer_ids,
                              verify_buckets=verify_buckets_from_env(), capture=cuda and not enforce_eager,
                              device_verdicts=self.draft_lookahead)

    def capture_graphs(self, max_batch: int, max_rows: int = 0) -> CaptureReport:
        """Capture the step graphs every batch of up to `max_batch` requests uses, ahead of traffic: the
        draft per request bucket, the verify and rollback/commit per row bucket (up to K + 1 rows a
        request — or, with prefill rows, `max_rows` tokens, the step budget — within the largest
        bucket); nothing where steps do not replay graphs."""
        graphs = self.step_graphs
        if graphs is None or not graphs.capture:
            return CaptureReport({}, None)
        rows = max(max_batch * (self.block_width + 1), max_rows if self.prefill_rows else 0)
        graphs.prepare(draft_buckets=buckets_up_to(max_batch, graphs.buckets),
                       verify_buckets=buckets_up_to(rows, graphs.verify_buckets))
        return CaptureReport(graphs.captured_buckets(), graphs.unavailable)

    # ------------------------------------------------------------------ the step
    def execute(self, step: SchedulerOutput, sampling: Mapping[str, RequestSampling]) -> StepResult:
        state = self.cache_state
        self.release(step.finished_request_ids | step.preempted_request_ids)
        if not step.chunks:
            return StepResult(RunnerOutput({}))
        for chunk in step.chunks:
            if chunk.is_new:
                state.free_sequence(chunk.request_id)
                self._installed_tables.pop(chunk.request_id, None)
            # the same table view means the same pages: installing nothing keeps the step graphs'
            # host tables unchanged (`build_decode_batch` rewrites a row only for a new list)
            if self._installed_tables.get(chunk.request_id) is not chunk.block_tables:
                state.set_block_tables(chunk.request_id, chunk.block_tables)
                self._installed_tables[chunk.request_id] = chunk.block_tables

        decodes = tuple(c for c in step.chunks if _is_decode(c))
        mixed = self.step_graphs is not None and decodes and len(decodes) < len(step.chunks)
        if mixed and not (self.prefill_rows and self._why_not_graphed(self.step_graphs, step.chunks, sampling) is None):
            # a prefill chunk joined the decodes (continuous batching): the decodes still replay
            # the graphs, and only the prefill chunks run eager (the requests share no cache slot)
            graphed = self._graphed_step(step.restricted_to(decodes), sampling)
            if graphed is not None:
                self.eager_stats.record(SPLIT_STEP)
                prefills = tuple(c for c in step.chunks if not _is_decode(c))
                return graphed.merged(self._eager_step(step.restricted_to(prefills), sampling))
        else:
            graphed = self._graphed_step(step, sampling)
            if graphed is not None:
                return graphed
        return self._eager_step(step, sampling)

    def _eager_step(self, step: SchedulerOutput, sampling: Mapping[str, RequestSampling]) -> StepResult:
        """The step as one eager chunked forward (steps 1-6 of the module docstring)."""
        state = self.cache_state
        verify_chunks = [c for c in step.chunks if c.num_draft_tokens > 0]
        proposals = self.drafter(verify_chunks, sampling) if verify_chunks else {}
        for chunk in verify_chunks:
            got = len(proposals[chunk.request_id].token_ids)
            if got != chunk.num_draft_tokens:
                raise ValueError(f"drafter proposed {got} tokens for {chunk.request_id!r}, "
                                 f"expected {chunk.num_draft_tokens}")

        token_chunks: list[list[int]] = []
        rows: list[int] = []
        sample_rows: dict[str, int] = {}  # request id → index into rows of its first sampled row
        prompt_rows: dict[str, tuple[int, int]] = {}
        offsets: dict[str, int] = {}  # request id → first batch row of its chunk
        offset = 0
        for chunk in step.chunks:
            rid, info = chunk.request_id, sampling[chunk.request_id]
            drafts = proposals[rid].token_ids if rid in proposals else ()
            token_chunks.append([*chunk.token_ids, *drafts])
            offsets[rid] = offset
            last_prompt_row = min(chunk.end_pos, info.num_prompt_tokens - 1)
            if info.wants_prompt_logprobs and chunk.start_pos < last_prompt_row:
                prompt_rows[rid] = (len(rows), last_prompt_row - chunk.start_pos)
                rows.extend(range(offset, offset + last_prompt_row - chunk.start_pos))
            if chunk.samples_next_token:
                first = offset + chunk.num_tokens - 1
                if rows and rows[-1] == first:
                    sample_rows[rid] = len(rows) - 1
                    rows.extend(range(first + 1, first + 1 + len(drafts)))
                else:
                    sample_rows[rid] = len(rows)
                    rows.extend(range(first, first + 1 + len(drafts)))
            offset += len(token_chunks[-1])

        snapshots = {c.request_id: CacheSnapshot.take(state, c.request_id, c.end_pos, c.end_pos + c.num_draft_tokens)
                     for c in verify_chunks}
        batch = ForwardBatch.from_chunks(token_chunks, [c.request_id for c in step.chunks],
                                         [c.start_pos for c in step.chunks], logits_for=rows, device=self.device)
        logits, aux = self.model.forward_with_aux(batch, state, self.aux_layer_ids)
        result = StepResult(RunnerOutput({}))
        result.logits_finite = bool(torch.isfinite(logits).all())

        outputs: dict[str, tuple[int, ...]] = {}
        plain = [c.request_id for c in step.chunks if c.samples_next_token and c.request_id not in proposals]
        if plain:
            picked = logits[torch.tensor([sample_rows[i] for i in plain], device=logits.device)]
            out = self.sampler.sample(picked, [sampling[i].params for i in plain], [sampling[i].seed for i in plain],
                                      [step.chunk_of(i).end_pos for i in plain])
            for rid, tok in zip(plain, out.token_ids.tolist(), strict=True):
                outputs[rid] = (tok,)
            if out.top_logprobs is not None:
                wanted = [sampling[i].params.logprobs or 0 for i in plain]
                for rid, record in zip(plain, out.top_logprobs.to_positions(wanted), strict=True):
                    if sampling[rid].params.logprobs is not None:
                        result.sampled_logprobs[rid] = record

        committed: dict[str, int] = {c.request_id: c.num_tokens for c in step.chunks}  # rows to commit per chunk
        for chunk in verify_chunks:
            rid, info = chunk.request_id, sampling[chunk.request_id]
            k = chunk.num_draft_tokens
            target = logits[sample_rows[rid]: sample_rows[rid] + k + 1]
            verdict = self._verify(chunk, proposals[rid], target, info)
            outputs[rid] = verdict.token_ids
            self.stats.record(k, verdict.num_accepted)
            # first rejected draft position onwards
            self.num_restored_entries += snapshots[rid].restore(chunk.end_pos + verdict.num_accepted)
            self.num_rolled_back_positions += k - verdict.num_accepted
            committed[rid] = chunk.num_tokens + verdict.num_accepted
            if info.params.logprobs is not None:
                lp = compute_logprobs(target[: verdict.num_accepted + 1])
                ids = torch.tensor(verdict.token_ids, dtype=torch.int64, device=lp.device)
                result.sampled_logprobs[rid] = gather_logprobs(lp, ids, info.params.logprobs).to_positions()
        result.runner_output = RunnerOutput(outputs)

        self._commit_context(step, offsets, committed, aux)

        for rid, (first, count) in prompt_rows.items():
            start = step.chunk_of(rid).start_pos
            targets = torch.tensor(sampling[rid].prompt_token_ids[start + 1: start + 1 + count], dtype=torch.int64,
                                   device=logits.device)
            lp = compute_logprobs(logits[first: first + count])
            result.prompt_logprobs[rid] = gather_logprobs(lp, targets, sampling[rid].params.prompt_logprobs or 0
                                                          ).to_positions()
        return result

    # ------------------------------------------------------------------ the graphed step
    def _graphed_step(self, step: SchedulerOutput, sampling: Mapping[str, RequestSampling]) -> StepResult | None:
        """The step through `step_graphs` (module docstring), or None: it runs eager, and why is
        recorded in `eager_stats` (logged once per reason)."""
        graphs = self.step_graphs
        if graphs is None:
            return None
        chunks = step.chunks
        reason = self._why_not_graphed(graphs, chunks, sampling)
        if reason is not None:
            self.eager_stats.record(f"speculative step: {reason}")
            return None
        ids = [c.request_id for c in chunks]
        ks = [c.num_draft_tokens for c in chunks]
        counts = [c.num_tokens + k for c, k in zip(chunks, ks, strict=True)]  # rows per request
        has_prefill = any(not _is_decode(c) for c in chunks)  # prefill chunks as rows (MXSERVE_PREFILL_ROWS)
        tokens = self._row_tokens(graphs, chunks, ks, sampling)
        if tokens is None:
            self.eager_stats.record(f"speculative step: {graphs.unavailable}")
            return None
        row_ids = [rid for rid, n in zip(ids, counts, strict=True) for _ in range(n)]
        row_positions = [c.start_pos + j for c, n in zip(chunks, counts, strict=True) for j in range(n)]
        out = graphs.verify(tokens, row_ids, row_positions, counts)
        if out is None:
            self.eager_stats.record(f"speculative step: {graphs.unavailable}")
            return None
        self.num_prefill_row_steps += has_prefill
        logits, _, choice = out
        num_rows = len(row_positions)
        all_greedy = all(sampling[rid].params.is_greedy for rid in ids)
        # one read: every row's token, the target's choice per row, the rows the device rejected (greedy),
        # the finiteness flag; with every request greedy, the rollback/commit and the next draft are
        # queued behind it first (`step_graphs` docstring: the draft lookahead)
        # the device's rejected rows are used only with the lookahead (off: the host's, as measured)
        on_device = all_greedy and self.draft_lookahead and not has_prefill
        device_rows = graphs.device_rejected(num_rows) if on_device else torch.zeros_like(choice)
        packed = torch.cat((tokens[:num_rows], choice, device_rows.to(torch.int64),
                            torch.isfinite(logits).all().to(torch.int64)[None]))
        ahead = on_device and self.drafter == self.dspark_drafts and any(ks)

        def queue_behind_the_read() -> None:
            if on_device:
                graphs.finish_on_device()
                if ahead:
                    graphs.draft_ahead()

        packed = self._read_behind(packed, queue_behind_the_read)
        row_tokens, choices = packed[:num_rows], packed[num_rows: 2 * num_rows]
        device_rejected, finite = packed[2 * num_rows: 3 * num_rows], packed[-1]

        result = StepResult(RunnerOutput({}), logits_finite=bool(finite))
        outputs: dict[str, tuple[int, ...]] = {}
        rejected: list[bool] = []
        first = 0
        for chunk, k in zip(chunks, ks, strict=True):
            rid, info = chunk.request_id, sampling[chunk.request_id]
            if not _is_decode(chunk):  # prefill rows all commit; where the prompt ends, the last row
                rejected += [False] * (chunk.num_tokens - 1)  # samples as a decode without drafts
                first += chunk.num_tokens - 1
                if not chunk.samples_next_token:
                    rejected.append(False)
                    first += 1
                    continue
            drafts = row_tokens[first + 1: first + 1 + k]
            if info.params.is_greedy:
                verdict = verify_greedy(choices[first: first + k + 1], drafts)
            elif k == 0:  # a plain decode samples as the eager step's plain chunks do (same draw)
                out = self.sampler.sample(logits[first: first + 1], [info.params], [info.seed], [chunk.end_pos])
                verdict = Verdict(0, (int(out.token_ids[0]),))
            else:
                verdict = self._verify(chunk, DraftProposal(tuple(drafts), None), logits[first: first + k + 1], info)
            outputs[rid] = verdict.token_ids
            if k:  # plain decodes are not verifies (as on the eager step)
                self.stats.record(k, verdict.num_accepted)
            self.num_rolled_back_positions += k - verdict.num_accepted
            rejected += [j > verdict.num_accepted for j in range(k + 1)]
            if info.params.logprobs is not None:
                lp = compute_logprobs(logits[first: first + verdict.num_accepted + 1])
                chosen = torch.tensor(verdict.token_ids, dtype=torch.int64, device=lp.device)
                result.sampled_logprobs[rid] = gather_logprobs(lp, chosen, info.params.logprobs).to_positions()
            first += k + 1
        if not on_device:
            graphs.finish(rejected)
        elif rejected != [bool(r) for r in device_rejected]:
            raise RuntimeError(f"speculative step: the device's rejected rows {device_rejected} differ from the "
                               f"host's verification {rejected}")
        if ahead:
            graphs.expect_ahead(ids, [outputs[rid][-1] for rid in ids],
                                [c.start_pos + len(outputs[c.request_id]) for c in chunks])
        result.runner_output = RunnerOutput(outputs)
        return result

    def _row_tokens(self, graphs: SpecStepGraphs, chunks: Sequence[ScheduledChunk], ks: Sequence[int],
                    sampling: Mapping[str, RequestSampling]) -> torch.Tensor | None:
        """Every verify row's token on the device, in chunk order: a decode's anchor and its k drafts, a
        prefill chunk's tokens; None when the draft graph is unavailable."""
        width = self.block_width + 1
        if not any(ks):  # plain decodes (drafts capped to 0 for a large batch, or no room left), prefill rows
            return torch.tensor([t for c in chunks for t in c.token_ids], dtype=torch.int64, device=self.device)
        decodes = [c for c in chunks if _is_decode(c)]
        if self.drafter == self.dspark_drafts:
            block = graphs.draft_tokens([c.token_ids[0] for c in decodes], [c.request_id for c in decodes],
                                        [c.start_pos for c in decodes])
            if block is None:
                return None
            flat = block.reshape(-1)
            if len(decodes) == len(chunks) and all(k == self.block_width for k in ks):
                return flat
            # capped requests verify only their first k drafts; prefill rows come from the host
            host = [t for c in chunks if not _is_decode(c) for t in c.token_ids]
            index, b, h = [], 0, flat.numel()
            for chunk, k in zip(chunks, ks, strict=True):
                if _is_decode(chunk):
                    index += [b * width + j for j in range(k + 1)]
                    b += 1
                else:
                    index += range(h, h + chunk.num_tokens)
                    h += chunk.num_tokens
            source = torch.cat((flat, torch.tensor(host, dtype=torch.int64, device=flat.device))) if host else flat
            return source[torch.tensor(index, dtype=torch.int64, device=flat.device)]
        # a replaced drafter (tests' scripted drafts): its host tokens
        proposals = self.drafter([c for c in chunks if c.num_draft_tokens], sampling)
        rows = []
        for chunk in chunks:
            drafts = proposals[chunk.request_id].token_ids if chunk.num_draft_tokens else ()
            if len(drafts) != chunk.num_draft_tokens:
                raise ValueError(f"drafter proposed {len(drafts)} tokens for {chunk.request_id!r}, "
                                 f"expected {chunk.num_draft_tokens}")
            rows += [*chunk.token_ids, *drafts]
        return torch.tensor(rows, dtype=torch.int64, device=self.device)

    def _why_not_graphed(self, graphs: SpecStepGraphs, chunks: Sequence[ScheduledChunk],
                         sampling: Mapping[str, RequestSampling]) -> str | None:
        if graphs.unavailable is not None:
            return graphs.unavailable
        if getattr(self.model, "observer", None) is not None:
            return "an observer/verification hook is set"
        prefills = [c for c in chunks if not _is_decode(c)]
        if prefills and not self.prefill_rows:
            return "a prefill chunk (every chunk must be one token: a decode, with or without drafts)"
        if any(sampling[c.request_id].wants_prompt_logprobs for c in prefills):
            return "a prefill chunk with prompt logprobs (prefill rows report none)"
        if (self.drafter == self.dspark_drafts and self.spec_config.draft_sample_method == "probabilistic"
                and not all(sampling[c.request_id].params.is_greedy for c in chunks)):
            return "probabilistic drafts (host-side draws)"
        if not graphs.fits(len(chunks), sum(c.num_tokens + c.num_draft_tokens for c in chunks)):
            return "more requests or rows than the largest bucket"
        return None

    # ------------------------------------------------------------------ pieces
    def _verify(self, chunk: ScheduledChunk, proposal: DraftProposal, target: torch.Tensor,
                info: RequestSampling) -> Verdict:
        drafts = list(proposal.token_ids)
        if info.params.is_greedy:
            return verify_greedy(torch.argmax(target, dim=-1).tolist(), drafts)
        k, anchor = len(drafts), chunk.start_pos
        p = processed_probs(target, [info.params] * (k + 1))
        if proposal.probs is not None:
            q = proposal.probs.to(p.device, torch.float64)
        else:
            q = torch.zeros(k, p.shape[1], dtype=torch.float64, device=p.device)
            q[torch.arange(k), torch.tensor(drafts)] = 1.0
        accept = [step_uniform(info.seed, anchor, DRAW_ACCEPT, i) for i in range(k)]
        final = step_uniform(info.seed, anchor, DRAW_FINAL, 0)
        method = verify_block if self.spec_config.rejection_sample_method == "block" else verify_standard
        return method(p, q, drafts, accept, final)

    def _commit_context(self, step: SchedulerOutput, offsets: Mapping[str, int], committed: Mapping[str, int],
                        aux: torch.Tensor) -> None:
        """Write the DSpark stage windows for every position committed this step."""
        rows, positions, slots = [], [], []
        for chunk in step.chunks:
            rid, n = chunk.request_id, committed[chunk.request_id]
            pos = torch.arange(chunk.start_pos, chunk.start_pos + n, device=aux.device)
            rows.append(torch.arange(offsets[rid], offsets[rid] + n, device=aux.device))
            positions.append(pos)
            slots.append(self.cache_state.slots(Pool.WINDOW, rid, pos))
        index = torch.cat(rows)
        self.draft.write_context(self.windows, aux[index], torch.cat(positions), torch.cat(slots))

    def dspark_drafts(self, chunks: Sequence[ScheduledChunk], sampling: Mapping[str, RequestSampling]
                      ) -> dict[str, DraftProposal]:
        """The DSpark drafter: one block forward for all verify chunks, then the Markov loop."""
        ids = [c.request_id for c in chunks]
        anchors = [c.token_ids[-1] for c in chunks]
        anchor_positions = [c.end_pos - 1 for c in chunks]
        base = self.draft.block_logits(self.windows, self.cache_state, ids, anchors, anchor_positions, self.block_width)
        probabilistic = [self.spec_config.draft_sample_method == "probabilistic" and not sampling[i].params.is_greedy
                         for i in ids]
        draft_probs: list[list[torch.Tensor]] = [[] for _ in ids]

        def pick(i: int, logits_i: torch.Tensor) -> torch.Tensor:
            tokens = torch.argmax(logits_i, dim=-1)
            for b, rid in enumerate(ids):
                if probabilistic[b]:
                    q = processed_probs(logits_i[b: b + 1], [sampling[rid].params])[0]
                    draft_probs[b].append(q)
                    tokens[b] = sample_from(q, step_uniform(sampling[rid].seed, anchor_positions[b], DRAW_DRAFT, i))
            return tokens

        num = max(c.num_draft_tokens for c in chunks)
        drafts, _ = self.draft.draft_tokens(base, torch.tensor(anchors), pick, num_tokens=num)
        proposals = {}
        for b, chunk in enumerate(chunks):
            k = chunk.num_draft_tokens
            probs = torch.stack(draft_probs[b][:k]) if probabilistic[b] else None
            proposals[chunk.request_id] = DraftProposal(tuple(drafts[b, :k].tolist()), probs)
        return proposals


def _is_decode(chunk: ScheduledChunk) -> bool:
    """One token that samples the next (with or without drafts): a row of the graphed verify."""
    return chunk.num_tokens == 1 and chunk.samples_next_token

