"""The decode lookahead (`mxserve.engine.decode_lookahead`) changes no token.

On the CPU the runner takes the engine's CUDA decode path as `benchmarks/host_step.py` does: the
graph decision is told the device is CUDA and `DecodeGraphs` runs uncaptured (`capture=False`),
the static-buffer path a GPU replays. The same requests then run with the lookahead on and off
(`MXSERVE_DECODE_LOOKAHEAD=0`); every token must be equal, and the lookahead must actually have
been used (and dropped where the batch changed), or the comparison proves nothing.
"""

from __future__ import annotations

import pytest
import torch

import mxserve.engine.model_runner as model_runner_module
from mxserve import LLM, SamplingParams
from mxserve.engine.cuda_graphs import DecodeGraphs
from mxserve.engine.decode_lookahead import OFF_SWITCH
from mxserve.model.decode_batch import DecodeGeometry

MAX_LEN = 64


def _graph_path_llm(checkpoint, monkeypatch) -> LLM:
    llm = LLM(str(checkpoint), device="cpu", max_model_len=MAX_LEN, max_num_seqs=4, block_size=8, progress=False)
    engine = llm.engine
    runner = engine.runner
    geometry = DecodeGeometry.for_positions(engine.model_config, runner.cache_state.block_size, MAX_LEN)
    runner.decode_graphs = DecodeGraphs(runner.model, runner.cache_state, geometry, torch.device("cpu"), capture=False)
    real_decide = model_runner_module.decide

    def decide_as_cuda(chunk_num_tokens, **kwargs):
        kwargs["device_type"] = "cuda"
        return real_decide(chunk_num_tokens, **kwargs)

    monkeypatch.setattr(model_runner_module, "decide", decide_as_cuda)
    return llm


def _run(llm: LLM) -> dict[str, list[int]]:
    """Three requests that end at different steps (the batch shrinks under a pending lookahead), one
    sampled with a seed, and a fourth that arrives mid-stream (the lookahead step is dropped)."""
    engine = llm.engine
    plans = {"a": ([5, 6, 7, 8, 9], SamplingParams(max_tokens=21, temperature=0, ignore_eos=True)),
             "b": ([11, 12, 13], SamplingParams(max_tokens=9, temperature=0, ignore_eos=True)),
             "c": ([3, 4], SamplingParams(max_tokens=14, temperature=0.8, seed=7, ignore_eos=True))}
    for rid, (prompt, params) in plans.items():
        engine.add_request(rid, prompt, params)
    tokens: dict[str, list[int]] = {}
    steps, arrived = 0, False
    while engine.has_unfinished_requests():
        for out in engine.step():
            tokens[out.request_id] = list(out.outputs[0].token_ids)
        steps += 1
        # the arrival lands on a pending lookahead when there is one (the lookahead-off run: step 6)
        if not arrived and steps >= 6 and (engine.runner._ahead is not None or (steps == 6 and _off())):
            engine.add_request("d", [21, 22, 23, 24], SamplingParams(max_tokens=6, temperature=0, ignore_eos=True))
            arrived = True
    return tokens


def _off() -> bool:
    import os

    return os.environ.get(OFF_SWITCH) == "0"


def test_lookahead_changes_no_token_and_is_used(tiny_all, monkeypatch):
    monkeypatch.setenv(OFF_SWITCH, "0")
    off = _graph_path_llm(tiny_all, monkeypatch)
    want = _run(off)
    off_stats = off.engine.runner.lookahead_stats
    monkeypatch.setenv(OFF_SWITCH, "1")
    llm = _graph_path_llm(tiny_all, monkeypatch)
    got = _run(llm)
    stats = llm.engine.runner.lookahead_stats
    assert got == want
    assert {rid: len(t) for rid, t in got.items()} == {"a": 21, "b": 9, "c": 14, "d": 6}
    assert off_stats.launched == 0
    # used on most decode steps; dropped where the batch changed (a request ended, one arrived)
    assert stats.used >= 8 and stats.dropped >= 1
    assert stats.launched == stats.used + stats.dropped  # none left pending: the last step predicts nothing


@pytest.mark.parametrize("max_tokens", [1, 2])
def test_no_lookahead_for_a_request_that_ends_now(tiny_all, monkeypatch, max_tokens):
    """A request that reaches max_tokens at this step launches nothing (it cannot run again)."""
    llm = _graph_path_llm(tiny_all, monkeypatch)
    out = llm.generate([[5, 6, 7]], SamplingParams(max_tokens=max_tokens, temperature=0, ignore_eos=True))
    assert len(out[0].outputs[0].token_ids) == max_tokens
    assert llm.engine.runner.lookahead_stats.launched == 0
