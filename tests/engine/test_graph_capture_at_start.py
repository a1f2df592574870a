"""Capturing every CUDA-graph bucket before traffic (`LLMEngine.capture_graphs`, what `mxserve serve`
does at start-up): which buckets, the report's wording, nothing on engines without graphs (CPU).
GPU (skipped without CUDA): after the capture, serving a batch captures nothing more, and the tokens
equal enforce_eager's (the capture runs on all-padding buffers, not on the first step's inputs).
"""

from __future__ import annotations

import logging

import pytest
import torch

from mxserve import LLM, SamplingParams
from mxserve.engine.cuda_graphs import BUCKETS, CaptureReport, buckets_up_to
from mxserve.kernels.chooser import ALL_TRITON

CUDA = torch.cuda.is_available()


def test_buckets_up_to_covers_every_batch_size_the_scheduler_can_reach():
    assert buckets_up_to(1) == (1,)
    assert buckets_up_to(5) == (1, 2, 4, 8)
    assert buckets_up_to(64) == BUCKETS
    assert buckets_up_to(500) == BUCKETS  # larger batches run eager or are cut to fit
    assert buckets_up_to(3, (2, 8)) == (2, 8)  # a batch of 3 lands in bucket 8


def test_capture_report_says_what_was_captured_or_why_not():
    done = CaptureReport({"draft": (1, 2), "verify": (1, 2, 4)}, None, 1.26)
    assert done.line() == "CUDA graphs: captured draft buckets 1, 2; verify buckets 1, 2, 4 in 1.3 s"
    refused = CaptureReport({"decode": ()}, "the decode forward syncs with the host (x.py:1 in f): boom")
    assert refused.line().startswith("CUDA graphs unavailable, steps run eager: the decode forward syncs")
    assert "decode buckets none" in refused.line()
    assert "nothing to capture" in CaptureReport({}, None).line()


def test_cpu_engine_has_nothing_to_capture_and_says_so(tiny_all, caplog):
    llm = LLM(str(tiny_all), device="cpu", progress=False)
    with caplog.at_level(logging.INFO, logger="mxserve.engine"):
        report = llm.engine.capture_graphs()
    assert report.buckets == {} and report.unavailable is None
    assert any("nothing to capture" in r.getMessage() for r in caplog.records)
    out = llm.generate([[1, 2, 3]], SamplingParams(max_tokens=4, temperature=0, ignore_eos=True))
    assert len(out[0].outputs[0].token_ids) == 4


@pytest.mark.parametrize("overrides", [{}, {"moe": "triton"}, dict(ALL_TRITON)])
def test_refused_graphs_with_reference_kernels_warn_how_to_get_them(tiny_all, caplog, overrides):
    """A GPU engine whose probe refuses capture because reference kernels sync (what the runner reports
    there; stood in for on the CPU) warns once, names the ops still on the reference, and says how to
    select the Triton ones; with every op on Triton the refusal is someone else's and no hint is given."""
    llm = LLM(str(tiny_all), device="cpu", progress=False, kernel_overrides=overrides)
    refused = CaptureReport({"decode": ()}, "the decode forward syncs with the host (moe/reference.py:1 in f)")
    llm.engine.runner.capture_graphs = lambda max_batch, max_rows=0: refused
    with caplog.at_level(logging.INFO, logger="mxserve.engine"):
        report = llm.engine.capture_graphs()
    assert report.unavailable == refused.unavailable
    assert any(r.getMessage().startswith("CUDA graphs unavailable, steps run eager") for r in caplog.records)
    hints = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    if len(overrides) == len(ALL_TRITON):
        assert hints == []
    else:
        on_reference = sorted(op for op in ALL_TRITON if op not in overrides)
        assert len(hints) == 1 and f"reference kernels of {', '.join(on_reference)} sync" in hints[0]
        assert "--kernel-overrides all-triton" in hints[0]


def _greedy(llm: LLM, prompts: list[list[int]]) -> list[list[int]]:
    params = SamplingParams(max_tokens=40, temperature=0, ignore_eos=True)
    return [list(o.outputs[0].token_ids) for o in llm.generate(prompts, params)]


PROMPTS = [[0, *range(7, 7 + n)] for n in (3, 17, 40, 9, 2)]


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs CUDA")
def test_gpu_plain_engine_captures_every_bucket_first_and_nothing_while_serving():
    opts = dict(device="cuda", max_model_len=512, progress=False, kernel_overrides=ALL_TRITON, max_num_seqs=8)
    llm = LLM(**opts)
    report = llm.engine.capture_graphs()
    assert report.unavailable is None and report.buckets == {"decode": (1, 2, 4, 8)}, report.line()
    got = _greedy(llm, PROMPTS)
    graphs = llm.engine.runner.decode_graphs
    assert graphs.captured_buckets() == (1, 2, 4, 8) and graphs.num_replays > 0
    assert got == _greedy(LLM(**opts, enforce_eager=True), PROMPTS)


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs CUDA")
def test_gpu_speculative_engine_captures_every_bucket_first_and_nothing_while_serving(monkeypatch):
    monkeypatch.setenv("MXSERVE_SPEC_GRAPHS", "auto")
    opts = dict(device="cuda", max_model_len=512, progress=False, kernel_overrides=ALL_TRITON, max_num_seqs=4)
    llm = LLM(**opts, speculative_config={"method": "dspark", "num_speculative_tokens": 3})
    report = llm.engine.capture_graphs()
    want_buckets = {"draft": (1, 2, 4), "verify": (1, 2, 4, 8, 16)}  # up to 4 requests x (3 + 1) rows
    assert report.unavailable is None and report.buckets == want_buckets, report.line()
    got = _greedy(llm, PROMPTS)
    graphs = llm.engine.runner.step_graphs
    assert graphs.captured_buckets() == want_buckets and graphs.num_steps > 0
    assert got == _greedy(LLM(**opts), PROMPTS)


def test_decode_max_rows_adds_the_row_buckets_and_refuses_other_values(monkeypatch):
    from mxserve.engine.cuda_graphs import decode_buckets_from_env
    assert decode_buckets_from_env() == BUCKETS  # default: the decode buckets only
    monkeypatch.setenv("MXSERVE_DECODE_MAX_ROWS", "256")
    assert decode_buckets_from_env() == (*BUCKETS, 128, 256)
    monkeypatch.setenv("MXSERVE_DECODE_MAX_ROWS", "100")
    with pytest.raises(ValueError, match="MXSERVE_DECODE_MAX_ROWS='100': expected one of"):
        decode_buckets_from_env()


@pytest.mark.parametrize(("prefill_rows", "want"), [("0", BUCKETS[:4]), ("1", (*BUCKETS, 128))])
def test_prefill_rows_capture_up_to_the_step_budget(tiny_all, monkeypatch, prefill_rows, want):
    """With prefill rows a step of up to max_num_batched_tokens tokens may replay a graph, so the
    start-up capture covers the buckets up to the budget (within MXSERVE_DECODE_MAX_ROWS), not only
    up to max_num_seqs. The static-buffer path stands in for capture on the CPU: the buckets asked
    for are the ones the runner prepares."""
    monkeypatch.setenv("MXSERVE_DECODE_MAX_ROWS", "256")
    monkeypatch.setenv("MXSERVE_PREFILL_ROWS", prefill_rows)
    llm = LLM(str(tiny_all), device="cpu", progress=False, max_num_seqs=8, max_num_batched_tokens=100,
              max_model_len=256)
    runner = llm.engine.runner
    assert runner.decode_graphs is not None and runner.decode_graphs.buckets == (*BUCKETS, 128, 256)
    asked = []
    runner.decode_graphs.capture = True  # what a CUDA runner has; prepare is stood in for below
    monkeypatch.setattr(runner.decode_graphs, "prepare", lambda bucket: asked.append(bucket) or True)
    runner.capture_graphs(llm.engine.config.max_num_seqs, max_rows=llm.engine.config.max_num_batched_tokens)
    assert tuple(asked) == want
