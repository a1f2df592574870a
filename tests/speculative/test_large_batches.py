"""Speculation at batch sizes the step graphs do not fit, and under continuous batching.

The scheduler cuts every decoding request's drafts evenly so the step's verify rows (1 + drafts
each) fit `max_verify_rows`, the step graphs' largest verify bucket, down to plain decodes (0 drafts); the
graphed step runs such chunks (no draft, one verify row each); a step in which prefill chunks join
the decodes replays the graphs for the decodes and runs only the prefill chunks eager. All on the
CPU through the static buffers (`MXSERVE_SPEC_GRAPHS=1`), the graphs' small buckets forced so the
cut bites at a few requests."""

from __future__ import annotations

from dataclasses import replace

import pytest

from mxserve import LLM, SamplingParams
from mxserve.config.scheduler_config import SchedulerConfig
from mxserve.engine.block_manager import BlockManager
from mxserve.engine.pool_spec import deepseek_v4_pool_specs
from mxserve.engine.request import Request, StopCriteria
from mxserve.engine.scheduler import Scheduler
from mxserve.engine.scheduler_output import RunnerOutput
from mxserve.engine.speculative.runner import SPLIT_STEP
from tests.speculative.helpers import random_prompts

GREEDY = dict(temperature=0, ignore_eos=True)


def decoding_scheduler(num_requests: int, *, k: int, max_verify_rows: int) -> tuple[Scheduler, list[int]]:
    """A scheduler whose `num_requests` requests all finished their prompts; their next step's drafts."""
    specs = deepseek_v4_pool_specs(num_blocks=256, block_size=4, compress_rate_csa=4, compress_rate_hca=16)
    sched = Scheduler(SchedulerConfig(max_model_len=64, max_num_batched_tokens=256, num_speculative_tokens=k,
                                      max_verify_rows=max_verify_rows), BlockManager(specs))
    for i in range(num_requests):
        sched.add_request(Request(str(i), (5, 6, 7), StopCriteria(max_tokens=20)))
    prefill = sched.schedule()
    sched.update_from_output(prefill, RunnerOutput({c.request_id: (8,) for c in prefill.chunks}))
    return sched, [c.num_draft_tokens for c in sched.schedule().chunks]


@pytest.mark.parametrize(("num_requests", "max_verify_rows", "drafts"), [
    (2, 0, 3),  # no limit: K
    (2, 8, 3),  # 2 x (1 + 3) = 8 rows fit
    (3, 8, 1),  # 8 // 3 - 1: 3 x 2 = 6 rows
    (4, 8, 1),
    (5, 8, 0),  # plain decodes: 5 rows
    (9, 8, 0),  # more requests than rows: plain decodes (the step itself then runs eager)
])
def test_drafts_are_cut_evenly_so_the_verify_rows_fit(num_requests, max_verify_rows, drafts):
    _, got = decoding_scheduler(num_requests, k=3, max_verify_rows=max_verify_rows)
    assert got == [drafts] * num_requests


@pytest.mark.parametrize(("env", "rows"), [(None, 64), ("512", 512), ("128", 128)])
def test_the_largest_verify_bucket_sets_the_row_limit(tiny_0731, monkeypatch, env, rows):
    """MXSERVE_SPEC_VERIFY_MAX_ROWS picks the largest verify bucket, and the scheduler's limit is it."""
    monkeypatch.setenv("MXSERVE_SPEC_GRAPHS", "1")
    if env is not None:
        monkeypatch.setenv("MXSERVE_SPEC_VERIFY_MAX_ROWS", env)
    llm = LLM(str(tiny_0731), max_model_len=64, progress=False, speculative_config={"num_speculative_tokens": 3})
    assert llm.engine.runner.step_graphs.verify_buckets[-1] == rows
    assert llm.engine.scheduler.config.max_verify_rows == rows
    assert llm.engine.runner.step_graphs.buckets[-1] == 64  # the draft part: requests, not rows


def test_a_verify_row_limit_that_is_no_bucket_is_refused(tiny_0731, monkeypatch):
    monkeypatch.setenv("MXSERVE_SPEC_GRAPHS", "1")
    monkeypatch.setenv("MXSERVE_SPEC_VERIFY_MAX_ROWS", "100")
    with pytest.raises(ValueError, match="MXSERVE_SPEC_VERIFY_MAX_ROWS='100'"):
        LLM(str(tiny_0731), max_model_len=64, progress=False, speculative_config={"num_speculative_tokens": 3})


def test_max_verify_rows_is_validated():
    with pytest.raises(ValueError, match="max_verify_rows"):
        SchedulerConfig(max_model_len=64, max_verify_rows=-1)


def small_buckets(llm: LLM, buckets: tuple[int, ...], max_verify_rows: int) -> None:
    """Shrink the step graphs' buckets and the scheduler's row limit with them (the engine wires
    the limit to the largest verify bucket, 64 by default)."""
    runner = llm.engine.runner
    assert llm.engine.scheduler.config.max_verify_rows == runner.max_verify_rows == 64
    runner.step_graphs.buckets = runner.step_graphs.verify_buckets = buckets
    llm.engine.scheduler.config = replace(llm.engine.scheduler.config, max_verify_rows=max_verify_rows)


def record_segments(llm: LLM) -> list[list[int]]:
    """Each graphed verify's rows per request (1 + its drafts)."""
    graphs = llm.engine.runner.step_graphs
    seen: list[list[int]] = []
    real = graphs.verify

    def recording(tokens, seq_ids, positions, segments):
        seen.append(list(segments))
        return real(tokens, seq_ids, positions, segments)

    graphs.verify = recording
    return seen


@pytest.mark.parametrize("lookahead", ["0", "1"])
def test_capped_and_mixed_steps_replay_the_graphs_and_stay_lossless(tiny_0731, lookahead, monkeypatch):
    """12 greedy requests over a 24-token step budget: prompts arrive in chunks while others decode,
    and up to 12 decode at once against 16-row buckets (K = 3 fits 4 requests). Tokens equal plain
    decoding; no step ran eager for its size; steps with drafts cut to 0 and steps with full blocks
    both replayed; prefill chunks ran eager beside graphed decodes. With and without the draft
    lookahead (no draft runs ahead of a step without drafts)."""
    monkeypatch.setenv("MXSERVE_SPEC_GRAPHS", "1")
    monkeypatch.setenv("MXSERVE_SPEC_LOOKAHEAD", lookahead)
    prompts = random_prompts(12, 499, seed=21, min_len=3, max_len=30)
    params = SamplingParams(max_tokens=10, **GREEDY)
    opts = dict(max_model_len=64, max_num_batched_tokens=24, long_prefill_token_threshold=16, progress=False)
    want = [o.outputs[0].token_ids for o in LLM(str(tiny_0731), **opts).generate(prompts, params)]
    spec = LLM(str(tiny_0731), speculative_config={"num_speculative_tokens": 3}, **opts)
    small_buckets(spec, (1, 2, 4, 8, 16), 16)
    segments = record_segments(spec)
    got = [o.outputs[0].token_ids for o in spec.generate(prompts, params)]
    assert got == want
    reasons = dict(spec.engine.runner.eager_stats.counts)
    assert not any("largest bucket" in r for r in reasons), reasons
    assert reasons.get(SPLIT_STEP, 0) > 0, reasons
    assert any(all(n == 1 for n in s) for s in segments)  # plain decodes replayed
    assert any(n == 4 for s in segments for n in s)  # full K = 3 blocks replayed
    assert all(sum(s) <= 16 for s in segments)
    assert spec.engine.spec_decode_stats.num_verifies > 0


def test_plain_decodes_on_the_graphed_step_sample_what_plain_decoding_samples(tiny_0731, monkeypatch):
    """Sampled requests whose drafts are all cut to 0 (a 1-row limit): every decode replays the
    verify graph as a plain decode and draws with the sampler's keyed draw, so the tokens equal a
    non-speculative engine's, token for token."""
    monkeypatch.setenv("MXSERVE_SPEC_GRAPHS", "1")
    prompts = random_prompts(6, 499, seed=23, min_len=3, max_len=12)
    params = [SamplingParams(max_tokens=8, temperature=0.9, top_p=0.95, seed=40 + i, ignore_eos=True)
              for i in range(len(prompts))]
    want = [o.outputs[0].token_ids for o in LLM(str(tiny_0731), max_model_len=64, progress=False)
            .generate(prompts, params)]
    spec = LLM(str(tiny_0731), max_model_len=64, progress=False, speculative_config={"num_speculative_tokens": 3})
    small_buckets(spec, (1, 2, 4, 8), 1)
    segments = record_segments(spec)
    got = [o.outputs[0].token_ids for o in spec.generate(prompts, params)]
    assert got == want
    assert segments and all(n == 1 for s in segments for n in s)
    assert spec.engine.spec_decode_stats.num_verifies == 0
