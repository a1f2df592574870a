"""Prefill chunks as rows of the graphed speculative step (`MXSERVE_PREFILL_ROWS=1`, off by default):
a step whose prefill chunks and verify rows fit a bucket replays the verify graph with one row per
prompt token (all committed; the last one samples where the prompt ends) instead of running the
prefill chunks eager. On the CPU through the static buffers (`MXSERVE_SPEC_GRAPHS=1`): greedy
tokens equal plain decoding, sampled ones the eager step's draws, acceptance counts the eager
step's; prompt-logprob requests keep the eager path.
"""

from __future__ import annotations

import pytest

from mxserve import LLM, SamplingParams
from tests.speculative.helpers import random_prompts

GREEDY = dict(temperature=0, ignore_eos=True)
OPTS = dict(max_model_len=64, max_num_batched_tokens=32, long_prefill_token_threshold=12, progress=False)


def _spec(tiny_0731, monkeypatch, graphs: str, rows: str, lookahead: str = "0") -> LLM:
    monkeypatch.setenv("MXSERVE_SPEC_GRAPHS", graphs)
    monkeypatch.setenv("MXSERVE_PREFILL_ROWS", rows)
    monkeypatch.setenv("MXSERVE_SPEC_LOOKAHEAD", lookahead)
    return LLM(str(tiny_0731), speculative_config={"num_speculative_tokens": 3}, **OPTS)


@pytest.mark.parametrize("lookahead", ["0", "1"])
def test_greedy_prefill_rows_are_lossless(tiny_0731, monkeypatch, lookahead):
    prompts = random_prompts(12, 499, seed=31, min_len=3, max_len=30)
    params = SamplingParams(max_tokens=8, **GREEDY)
    want = [o.outputs[0].token_ids for o in LLM(str(tiny_0731), **OPTS).generate(prompts, params)]
    eager = _spec(tiny_0731, monkeypatch, "0", "0")
    assert [o.outputs[0].token_ids for o in eager.generate(prompts, params)] == want
    rows = _spec(tiny_0731, monkeypatch, "1", "1", lookahead)
    got = [o.outputs[0].token_ids for o in rows.generate(prompts, params)]
    assert got == want
    reasons = dict(rows.engine.runner.eager_stats.counts)
    assert not any("prefill" in r for r in reasons), reasons  # no prefill chunk ran eager
    assert rows.engine.runner.num_prefill_row_steps > 0
    assert rows.engine.spec_decode_stats.as_dict() == eager.engine.spec_decode_stats.as_dict()


def test_sampled_prefill_rows_draw_what_the_eager_step_draws(tiny_0731, monkeypatch):
    prompts = random_prompts(6, 499, seed=32, min_len=3, max_len=20)
    params = [SamplingParams(max_tokens=6, temperature=0.9, top_p=0.95, seed=50 + i, logprobs=2, ignore_eos=True)
              for i in range(len(prompts))]
    eager = _spec(tiny_0731, monkeypatch, "0", "0")
    want = [(o.outputs[0].token_ids, [lp.token_id for lp in o.outputs[0].logprobs])
            for o in eager.generate(prompts, params)]
    rows = _spec(tiny_0731, monkeypatch, "1", "1")
    got = [(o.outputs[0].token_ids, [lp.token_id for lp in o.outputs[0].logprobs])
           for o in rows.generate(prompts, params)]
    assert got == want
    assert not any("prefill" in r for r in rows.engine.runner.eager_stats.counts)
    assert rows.engine.runner.num_prefill_row_steps > 0


def test_prompt_logprobs_keep_the_eager_prefill(tiny_0731, monkeypatch):
    rows = _spec(tiny_0731, monkeypatch, "1", "1")
    prompt = [0, *range(9, 30)]
    params = SamplingParams(max_tokens=4, prompt_logprobs=1, **GREEDY)
    out = rows.generate([prompt], params)[0]
    assert len(out.prompt_logprobs) == len(prompt)
    reasons = dict(rows.engine.runner.eager_stats.counts)
    assert any("prompt logprobs" in r for r in reasons), reasons
