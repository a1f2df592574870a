"""Steps that mix decodes with prefill chunks (continuous batching): the decodes replay the decode
graph and only the prefill chunks run eager (`ModelRunner._split_step`). On the CPU through the
graphs' static buffers (`MXSERVE_DECODE_GRAPHS=1`): the same tokens and logprobs as an all-eager
engine, for greedy, seeded sampled, logprob and prompt-logprob requests under chunked prefill."""

from __future__ import annotations

import pytest

from mxserve import LLM, SamplingParams
from mxserve.engine.model_runner import SPLIT_STEP

OPTS = dict(max_model_len=96, max_num_batched_tokens=20, long_prefill_token_threshold=12, progress=False)


def _prompts() -> list[list[int]]:
    return [[0, *range(5 + i, 5 + i + n)] for i, n in enumerate((3, 40, 7, 25, 2, 33))]


def _params() -> list[SamplingParams]:
    return [
        SamplingParams(max_tokens=12, temperature=0, ignore_eos=True),
        SamplingParams(max_tokens=9, temperature=0.8, top_p=0.9, seed=7, ignore_eos=True),
        SamplingParams(max_tokens=10, temperature=0, logprobs=3, ignore_eos=True),
        SamplingParams(max_tokens=8, temperature=1.0, seed=11, prompt_logprobs=2, ignore_eos=True),
        SamplingParams(max_tokens=14, temperature=0, ignore_eos=True),
        SamplingParams(max_tokens=6, temperature=0.7, top_k=20, seed=3, logprobs=1, ignore_eos=True),
    ]


def _run(llm: LLM) -> list[tuple]:
    outs = llm.generate(_prompts(), _params())
    return [(o.outputs[0].token_ids, repr(o.outputs[0].logprobs), repr(o.prompt_logprobs)) for o in outs]


def test_mixed_steps_replay_the_decodes_and_match_the_eager_engine(tiny_all, monkeypatch):
    want = _run(LLM(str(tiny_all), enforce_eager=True, **OPTS))
    monkeypatch.setenv("MXSERVE_DECODE_GRAPHS", "1")
    split = LLM(str(tiny_all), **OPTS)
    assert _run(split) == want
    runner = split.engine.runner
    reasons = dict(runner.eager_stats.counts)
    assert reasons.get(SPLIT_STEP, 0) > 0, reasons
    assert runner.decode_graphs.num_static_steps > 0 and runner.decode_graphs.num_replays == 0


def test_decode_graphs_switch_is_validated(tiny_all, monkeypatch):
    monkeypatch.setenv("MXSERVE_DECODE_GRAPHS", "yes")
    with pytest.raises(ValueError, match="MXSERVE_DECODE_GRAPHS"):
        LLM(str(tiny_all), **OPTS)
