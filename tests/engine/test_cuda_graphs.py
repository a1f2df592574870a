"""CUDA-graph decode machinery (mxserve.engine.cuda_graphs): buckets, padding, the eager reasons.

CPU: bucket choice, padding, every fallback reason, the once-per-reason log, and the runner hook
recording why each engine step ran eager; `DecodeGraphs` without capture (static buffers, padding,
row slicing) == the eager forward. GPU (marked gpu, skipped without CUDA): `GraphPool` replay ==
eager; the default model's greedy 64 tokens with graphs == enforce_eager, tokens and sampled logits
bit for bit, at batch 1 and at 5 prompts (bucket 8), with the default kernels and with every
Triton kernel forced; one decode_forward step under set_sync_debug_mode("error") raises nothing.
"""

from __future__ import annotations

import copy
import logging

import pytest
import torch

from mxserve import LLM, SamplingParams
from mxserve.engine.cuda_graphs import (
    BUCKETS,
    NOT_CAPTURABLE,
    DecodeGraphs,
    EagerStats,
    GraphPool,
    bucket_for,
    decide,
    pad_to_bucket,
)
from mxserve.model.checkpoint import CheckpointReader
from mxserve.model.decode_batch import DecodeBatch, DecodeGeometry, build_decode_batch
from mxserve.model.deepseek_v4 import DeepseekV4Model
from mxserve.model.forward_batch import ForwardBatch

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


def test_cpu_engine_steps_record_why_they_ran_eager(tiny_all):
    llm = LLM(str(tiny_all), device="cpu", numerics="exact", max_model_len=64, progress=False)
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


def test_hooks_and_unavailable_graphs_are_reasons():
    base = dict(enforce_eager=False, device_type="cuda", model_capturable=True)
    assert decide([1], **base, hooks_on=True).reason.startswith("an observer/verification hook is set")
    assert decide([1], **base, unavailable="capture failed: x").reason == "capture failed: x"
    assert decide([1], **base).bucket == 1


def test_static_decode_buffers_equal_the_eager_forward_on_cpu(tiny_all):
    """`DecodeGraphs` without capture (the same staging, padding and row slicing the GPU replays):
    three sequences in bucket 4 for two steps == `forward` on chunks of one, bit for bit."""
    reader = CheckpointReader(tiny_all)
    model = DeepseekV4Model(reader.config, reader.load(progress=False), numerics="exact", resident_weights=True)
    eager_state = model.new_cache_state(max_sequences=3, max_positions=40, block_size=8)
    static_state = copy.deepcopy(eager_state)
    geometry = DecodeGeometry.for_positions(model.config, 8, 40)
    graphs = DecodeGraphs(model, static_state, geometry, torch.device("cpu"), capture=False)
    tokens, seqs, positions = [3, 9, 4], ["a", "b", "c"], [0, 0, 0]
    prompts = {"b": [5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19], "c": [20, 21, 22]}
    for state in (eager_state, static_state):
        model.forward(ForwardBatch.from_chunks(list(prompts.values()), list(prompts), [0, 0]), state)
    positions = [0, 15, 3]
    for _ in range(2):
        want = model.forward(ForwardBatch.from_chunks([[t] for t in tokens], seqs, positions), eager_state)
        got = graphs.run(tokens, seqs, positions, bucket_for(len(seqs)))
        assert got.shape == want.shape and torch.equal(got, want)
        tokens, positions = want.argmax(-1).tolist(), [p + 1 for p in positions]
    assert graphs.unavailable is None and graphs.captured_buckets() == ()


def _greedy(llm: LLM, prompts: list[list[int]], num_tokens: int) -> tuple[list[list[int]], list[torch.Tensor]]:
    """Greedy tokens per prompt and, per step, the logits the sampler saw (recorded bit for bit)."""
    seen: list[torch.Tensor] = []
    runner = llm.engine.runner
    real = runner.sampler.sample

    def recording(logits, *args, **kwargs):
        seen.append(logits.detach().cpu().clone())
        return real(logits, *args, **kwargs)

    runner.sampler.sample = recording
    params = SamplingParams(max_tokens=num_tokens, temperature=0, ignore_eos=True)
    outputs = llm.generate(prompts, params)
    return [list(o.outputs[0].token_ids) for o in outputs], seen


def _graphs_vs_eager(prompts: list[list[int]], bucket: int, **options) -> None:
    graphs = LLM(device="cuda", max_model_len=512, progress=False, **options)
    eager = LLM(device="cuda", max_model_len=512, enforce_eager=True, progress=False, **options)
    got_tokens, got_logits = _greedy(graphs, prompts, 64)
    want_tokens, want_logits = _greedy(eager, prompts, 64)
    runner = graphs.engine.runner
    assert runner.decode_graphs is not None and runner.decode_graphs.unavailable is None, (
        f"graphs unavailable: {dict(runner.eager_stats.counts)}")
    assert bucket in runner.decode_graphs.captured_buckets() and runner.decode_graphs.num_replays > 0
    assert got_tokens == want_tokens
    assert len(got_logits) == len(want_logits)
    for step, (a, b) in enumerate(zip(got_logits, want_logits, strict=True)):
        assert torch.equal(a, b), f"step {step}: logits differ, max |Δ| {(a - b).abs().max():.3e}"
    assert set(eager.engine.runner.eager_stats.counts) == {"enforce_eager=True"}


ALL_TRITON = {"linear": "triton", "moe": "triton", "attention": "triton"}


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs CUDA")
@pytest.mark.parametrize("num_prompts,bucket", [(1, 1), (5, 8)])
def test_gpu_default_model_graphs_equal_eager_all_triton(num_prompts, bucket):
    """The packaged default model with every Triton kernel forced, greedy 64 tokens: graph replay ==
    enforce_eager, tokens and the sampled logits bit for bit; 5 prompts of different lengths replay
    bucket 8 (3 padding rows). (H200, 2026-11-29: passed for 5 prompts.)"""
    prompts = [[0, *range(7, 7 + n)] for n in (3, 17, 40, 9, 66)[:num_prompts]]
    _graphs_vs_eager(prompts, bucket, kernel_overrides=ALL_TRITON)


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs CUDA")
def test_gpu_reference_kernels_refuse_capture_and_stay_correct():
    """With the default (reference) kernels the decode step syncs with the host (the reference MoE
    selects its tokens with nonzero), so the probe refuses capture, names the syncing frame, and every
    step runs eager with the same tokens as enforce_eager (H200, 2026-11-29: moe/reference.py)."""
    prompts = [[0, *range(7, 7 + n)] for n in (3, 17)]
    graphs = LLM(device="cuda", max_model_len=512, progress=False)
    eager = LLM(device="cuda", max_model_len=512, enforce_eager=True, progress=False)
    got, _ = _greedy(graphs, prompts, 16)
    want, _ = _greedy(eager, prompts, 16)
    assert got == want
    dg = graphs.engine.runner.decode_graphs
    assert dg is not None and dg.unavailable is not None and "syncs with the host" in dg.unavailable
    assert dg.captured_buckets() == ()


def _one_static_step_without_sync(**options) -> None:
    llm = LLM(device="cuda", max_model_len=512, progress=False, **options)
    model = llm.engine.model
    # A self-managed cache state (no scheduler runs here); positions past the first windows and entries.
    state = model.new_cache_state(max_sequences=3, max_positions=512, block_size=64, device="cuda")
    geometry = DecodeGeometry.for_positions(model.config, state.block_size, 512)
    host = build_decode_batch([5, 6, 7], ["a", "b", "c"], [0, 130, 300], state, geometry, num_rows=4)
    static = DecodeBatch.empty(4, geometry, device="cuda")
    static.copy_(host)
    model.decode_forward(static, state, geometry)  # warm-up: Triton compiles, lazy CUDA init
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        logits = model.decode_forward(static, state, geometry)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert torch.isfinite(logits).all()


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs CUDA")
def test_gpu_decode_step_has_no_host_sync_all_triton():
    """One decode_forward step under set_sync_debug_mode("error") raises nothing with every Triton
    kernel: nothing inside the region a graph captures synchronises with the host. (The reference
    kernels do sync: see test_gpu_reference_kernels_refuse_capture_and_stay_correct.)"""
    _one_static_step_without_sync(kernel_overrides=ALL_TRITON)


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs CUDA")
def test_gpu_engine_whose_first_forward_is_a_decode_step_still_graphs():
    """Prompts of one token make an engine's very first forward a decode step: its one-time lazy
    work (expert stacking reads a scale range, the router's cached device scalar) syncs. The probe
    must judge the steady state, not that first call: graphs replay, and the tokens equal eager.
    (H200, 2026-12-03: before GraphCapturer's plain first call, every step of such an engine ran
    eager, with moe/router.py or moe/experts.py named as the syncing frame.)"""
    prompts = [[0], [0], [0]]
    graphs = LLM(device="cuda", max_model_len=512, progress=False, kernel_overrides=ALL_TRITON)
    got, _ = _greedy(graphs, prompts, 16)
    dg = graphs.engine.runner.decode_graphs
    assert dg is not None and dg.unavailable is None, f"graphs unavailable: {dict(graphs.engine.runner.eager_stats.counts)}"
    assert dg.num_replays >= 15
    eager = LLM(device="cuda", max_model_len=512, enforce_eager=True, progress=False, kernel_overrides=ALL_TRITON)
    want, _ = _greedy(eager, prompts, 16)
    assert got == want


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs CUDA")
def test_gpu_mixed_steps_replay_the_decodes_beside_eager_prefill_chunks():
    """Chunked prefill beside decodes (a 32-token step budget): the split steps replay the decode
    graph for the decodes and run only the prefill chunks eager; the tokens equal enforce_eager."""
    from mxserve.engine.model_runner import SPLIT_STEP

    prompts = [[0, *range(7, 7 + n)] for n in (3, 60, 9, 45, 2)]
    opts = dict(device="cuda", max_model_len=512, progress=False, kernel_overrides=ALL_TRITON,
                max_num_batched_tokens=32, long_prefill_token_threshold=16)
    graphs = LLM(**opts)
    got, _ = _greedy(graphs, prompts, 24)
    want, _ = _greedy(LLM(**opts, enforce_eager=True), prompts, 24)
    assert got == want
    runner = graphs.engine.runner
    assert runner.eager_stats.counts[SPLIT_STEP] > 0, dict(runner.eager_stats.counts)
    assert runner.decode_graphs.unavailable is None and runner.decode_graphs.num_replays > 0
