"""Prefill chunks as decode rows of the graph (`MXSERVE_PREFILL_ROWS=1`, off by default): a step whose
tokens fit a bucket replays the decode graph with one row per token instead of an eager forward.
On the CPU through the graphs' static buffers (`MXSERVE_DECODE_GRAPHS=1`): the steps take the path,
the sampled logits stay within chunking's tolerance of an all-eager engine's, and the greedy tokens
and prompt logprobs' token ids equal it. A row computes what a one-token decode computes, so this
is chunk size 1, not the eager prefill bit for bit (tests/model/test_incremental.py).
"""

from __future__ import annotations

import pytest
import torch

from mxserve import LLM, SamplingParams
from mxserve.engine.cuda_graphs import decide

OPTS = dict(max_model_len=96, max_num_batched_tokens=32, long_prefill_token_threshold=16, progress=False,
            numerics="exact")
BASE = dict(enforce_eager=False, device_type="cpu", model_capturable=True, static_buffers=True)


def test_prefill_rows_choose_the_bucket_by_tokens():
    assert decide([1, 5, 1], **BASE).reason.startswith("prefill chunk(s) in the step")
    assert decide([1, 5, 1], **BASE, prefill_rows=True).bucket == 8
    assert decide([1, 1], **BASE, prefill_rows=True).bucket == 2  # decodes: one row each, as before
    too_big = decide([40, 30], **BASE, prefill_rows=True)
    assert too_big.is_eager and too_big.reason == ("a step of 70 tokens is above the largest bucket 64 "
                                                   "(prefill chunks as decode rows)")


def test_prefill_rows_switch_is_validated(tiny_all, monkeypatch):
    monkeypatch.setenv("MXSERVE_PREFILL_ROWS", "yes")
    with pytest.raises(ValueError, match="MXSERVE_PREFILL_ROWS='yes'"):
        LLM(str(tiny_all), **OPTS)


def _greedy(llm: LLM) -> tuple[list[list[int]], list[torch.Tensor]]:
    seen: list[torch.Tensor] = []
    real = llm.engine.runner.sampler.sample

    def recording(logits, *args, **kwargs):
        seen.append(logits.detach().clone())
        return real(logits, *args, **kwargs)

    llm.engine.runner.sampler.sample = recording
    prompts = [[0, *range(5 + i, 5 + i + n)] for i, n in enumerate((3, 40, 7, 25, 2, 33))]
    params = SamplingParams(max_tokens=10, temperature=0, ignore_eos=True)
    return [list(o.outputs[0].token_ids) for o in llm.generate(prompts, params)], seen


def test_prefill_chunks_run_as_rows_and_match_the_eager_engine(tiny_all, monkeypatch):
    want, want_logits = _greedy(LLM(str(tiny_all), enforce_eager=True, **OPTS))
    monkeypatch.setenv("MXSERVE_DECODE_GRAPHS", "1")
    monkeypatch.setenv("MXSERVE_PREFILL_ROWS", "1")
    rows = LLM(str(tiny_all), **OPTS)
    got, got_logits = _greedy(rows)
    runner = rows.engine.runner
    assert runner.num_prefill_row_steps > 0
    assert not any("prefill" in reason for reason in runner.eager_stats.counts), dict(runner.eager_stats.counts)
    assert got == want
    assert len(got_logits) == len(want_logits)
    for step, (a, b) in enumerate(zip(got_logits, want_logits, strict=True)):
        err = ((a - b).abs().max() / b.abs().max()).item()
        assert err <= 1e-5, f"step {step}: logits differ by {err:.2e} relative"


def test_prompt_logprobs_through_rows(tiny_all, monkeypatch):
    params = SamplingParams(max_tokens=4, temperature=0, prompt_logprobs=2, ignore_eos=True)
    prompt = [0, *range(9, 30)]
    want = LLM(str(tiny_all), enforce_eager=True, **OPTS).generate([prompt], params)[0]
    monkeypatch.setenv("MXSERVE_DECODE_GRAPHS", "1")
    monkeypatch.setenv("MXSERVE_PREFILL_ROWS", "1")
    llm = LLM(str(tiny_all), **OPTS)
    got = llm.generate([prompt], params)[0]
    assert llm.engine.runner.num_prefill_row_steps > 0
    assert got.outputs[0].token_ids == want.outputs[0].token_ids
    assert len(got.prompt_logprobs) == len(want.prompt_logprobs) == len(prompt)
    for g, w in zip(got.prompt_logprobs[1:], want.prompt_logprobs[1:], strict=True):
        assert (g.token_id, g.rank, g.top.keys()) == (w.token_id, w.rank, w.top.keys())
        assert abs(g.logprob - w.logprob) <= 1e-4


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize(("max_rows", "budget", "chunk"), [("64", 64, 32), ("256", 256, 128)])
def test_gpu_prefill_rows_give_the_eager_prefills_tokens_all_triton(monkeypatch, max_rows, budget, chunk):
    """The H200 gate for turning the switch on: the default model with every Triton kernel, prompts
    in chunks beside decodes (a step budget no larger than the largest bucket, so every step fits a
    bucket; 256: MXSERVE_DECODE_MAX_ROWS's 128- and 256-row buckets, whole prompts in one step): the
    prefill steps replay the decode graph, and the greedy tokens equal the eager prefill's."""
    from mxserve.kernels.chooser import ALL_TRITON

    prompts = [[0, *range(7, 7 + n)] for n in (3, 60, 9, 45, 2, 24, 17)]
    params = SamplingParams(max_tokens=32, temperature=0, ignore_eos=True)
    opts = dict(device="cuda", max_model_len=512, progress=False, kernel_overrides=ALL_TRITON,
                max_num_batched_tokens=budget, long_prefill_token_threshold=chunk)
    want = [list(o.outputs[0].token_ids) for o in LLM(**opts).generate(prompts, params)]
    monkeypatch.setenv("MXSERVE_PREFILL_ROWS", "1")
    monkeypatch.setenv("MXSERVE_DECODE_MAX_ROWS", max_rows)
    llm = LLM(**opts)
    got = [list(o.outputs[0].token_ids) for o in llm.generate(prompts, params)]
    runner = llm.engine.runner
    assert runner.num_prefill_row_steps > 0 and runner.decode_graphs.num_replays > 0
    assert not any("prefill" in reason for reason in runner.eager_stats.counts), dict(runner.eager_stats.counts)
    assert got == want


def test_larger_row_buckets_take_a_whole_prompt(tiny_all, monkeypatch):
    """MXSERVE_DECODE_MAX_ROWS=128: a 100-token prompt in one step of a 128-token budget replays the
    128-row bucket instead of running eager, with the eager engine's greedy tokens."""
    assert decide([100], **BASE, prefill_rows=True).is_eager
    assert decide([100], **BASE, prefill_rows=True, buckets=(1, 2, 4, 8, 16, 32, 64, 128)).bucket == 128
    opts = dict(device="cpu", max_model_len=160, max_num_batched_tokens=128, progress=False, numerics="exact")
    prompt = [0, *range(5, 104)]
    params = SamplingParams(max_tokens=6, temperature=0, ignore_eos=True)
    want = LLM(str(tiny_all), enforce_eager=True, **opts).generate([prompt], params)[0].outputs[0].token_ids
    monkeypatch.setenv("MXSERVE_DECODE_GRAPHS", "1")
    monkeypatch.setenv("MXSERVE_PREFILL_ROWS", "1")
    monkeypatch.setenv("MXSERVE_DECODE_MAX_ROWS", "128")
    llm = LLM(str(tiny_all), **opts)
    got = llm.generate([prompt], params)[0].outputs[0].token_ids
    runner = llm.engine.runner
    assert runner.num_prefill_row_steps == 1  # the whole prompt, one step
    assert not any("prefill" in reason for reason in runner.eager_stats.counts), dict(runner.eager_stats.counts)
    assert got == want
