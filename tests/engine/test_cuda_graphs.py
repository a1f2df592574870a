"""CUDA-graph decode machinery (mxserve.engine.cuda_graphs): buckets, padding, the eager reasons.

CPU: bucket choice, padding, every fallback reason, the once-per-reason log, and the runner hook
recording why each engine step ran eager. GPU (skipped without CUDA): `GraphPool` captures a
static function per bucket and replay == eager bit for bit; the engine on CUDA reports that the
DeepSeek-V4 forward is not capturable (no capture is claimed) and its tokens equal enforce_eager.
"""

from __future__ import annotations

import logging

import pytest
import torch

from mxserve import LLM, SamplingParams
from mxserve.engine.cuda_graphs import (
    BUCKETS,
    NOT_CAPTURABLE,
    EagerStats,
    GraphPool,
    bucket_for,
    decide,
    pad_to_bucket,
)

CUDA = torch.cuda.is_available()


def test_bucket_choice():
    assert BUCKETS == (1, 2, 4, 8, 16, 32, 64)
    assert [bucket_for(n) for n in (1, 2, 3, 5, 8, 9, 33, 64)] == [1, 2, 4, 8, 8, 16, 64, 64]
    assert bucket_for(0) is None and bucket_for(65) is None


def test_padding_keeps_rows_and_fills_the_rest():
    x = torch.arange(6).view(3, 2)
    padded = pad_to_bucket(x, 4, fill=-1)
    assert padded.shape == (4, 2) and torch.equal(padded[:3], x) and (padded[3] == -1).all()
    with pytest.raises(ValueError, match="3 rows do not fit bucket 2"):
        pad_to_bucket(x, 2)


@pytest.mark.parametrize(
    "tokens,kwargs,expected",
    [
        ([1, 1], dict(enforce_eager=True), "enforce_eager=True"),
        ([1, 1], dict(device_type="cpu"), "device is cpu"),
        ([1, 1], dict(model_capturable=False), NOT_CAPTURABLE),
        ([1, 5, 1], {}, "prefill chunk(s) in the step"),
        ([1] * 65, {}, "batch of 65 is above the largest bucket 64"),
    ],
)
def test_each_eager_reason(tokens, kwargs, expected):
    args = dict(enforce_eager=False, device_type="cuda", model_capturable=True) | kwargs
    decision = decide(tokens, **args)
    assert decision.is_eager and decision.reason.startswith(expected)


def test_capturable_decode_goes_to_its_bucket():
    decision = decide([1] * 5, enforce_eager=False, device_type="cuda", model_capturable=True)
    assert not decision.is_eager and decision.bucket == 8 and decision.reason is None


def test_eager_reasons_are_logged_once_and_counted(caplog):
    stats = EagerStats()
    with caplog.at_level(logging.INFO, logger="mxserve.engine"):
        for reason in ("a", "b", "a", "a"):
            stats.record(reason)
    assert stats.counts == {"a": 3, "b": 1}
    assert caplog.text.count("step runs eager (a)") == 1 and caplog.text.count("step runs eager (b)") == 1


@pytest.mark.skipif(CUDA, reason="the CPU engine's reason")
def test_cpu_engine_steps_record_why_they_ran_eager(tiny_all):
    llm = LLM(str(tiny_all), numerics="exact", max_model_len=64, progress=False)
    llm.generate([[0, 5, 7]], SamplingParams(max_tokens=3, temperature=0, ignore_eos=True))
    counts = llm.engine.runner.eager_stats.counts
    assert list(counts) == ["device is cpu (CUDA graphs need a CUDA device)"] and counts.most_common(1)[0][1] == 3
    with pytest.raises(ValueError, match="enforce_eager"):
        LLM(str(tiny_all), enforce_eager="yes", progress=False)


@pytest.mark.skipif(not CUDA, reason="needs CUDA")
def test_graph_pool_replay_equals_eager_on_gpu():
    g = torch.Generator(device="cuda").manual_seed(0)
    w = torch.randn(64, 64, device="cuda", generator=g)

    def fn(x: torch.Tensor) -> torch.Tensor:  # static shapes, no host sync
        return torch.softmax(torch.tanh(x @ w) @ w.T, dim=-1)

    pool = GraphPool(fn)
    example = torch.randn(64, 64, device="cuda", generator=g)
    for bucket in BUCKETS:
        pool.capture(bucket, example)
    assert pool.captured_buckets() == BUCKETS
    for n in (1, 3, 8, 13, 64):
        x = torch.randn(n, 64, device="cuda", generator=g)
        assert torch.equal(pool.run(x), fn(pad_to_bucket(x, bucket_for(n)))[:n])
    with pytest.raises(KeyError, match="batch of 65"):
        pool.run(torch.randn(65, 64, device="cuda"))


@pytest.mark.skipif(not CUDA, reason="needs CUDA")
def test_gpu_engine_reports_the_forward_is_not_capturable(tiny_all):
    """No capture is claimed: graph mode requested, every step eager with the reason; tokens as eager."""
    params = SamplingParams(max_tokens=4, temperature=0, ignore_eos=True)
    graphs = LLM(str(tiny_all), numerics="exact", max_model_len=64, device="cuda", progress=False)
    eager = LLM(str(tiny_all), numerics="exact", max_model_len=64, device="cuda", enforce_eager=True, progress=False)
    prompts = [[0, 5, 7, 9], [0, 11]]
    got = [o.outputs[0].token_ids for o in graphs.generate(prompts, params)]
    want = [o.outputs[0].token_ids for o in eager.generate(prompts, params)]
    assert got == want
    assert set(graphs.engine.runner.eager_stats.counts) == {NOT_CAPTURABLE}
    assert set(eager.engine.runner.eager_stats.counts) == {"enforce_eager=True"}
