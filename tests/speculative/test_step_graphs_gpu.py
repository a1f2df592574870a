"""The graphed speculative step on CUDA (`engine/speculative/step_graphs`): the packaged default
model with its trained DSpark draft and every Triton kernel, greedy: the tokens equal plain
decoding's, the verify steps replay captured graphs, and the drafts equal the eager step's (same
acceptance counts). The CPU twins of these checks run the static buffers without capture
(tests/speculative/test_engine_lossless.py)."""

from __future__ import annotations

import pytest
import torch

from mxserve import LLM, SamplingParams
from mxserve.kernels.chooser import ALL_TRITON

CUDA = torch.cuda.is_available()


def _generate(monkeypatch, prompts, spec_graphs: str | None, k: int) -> tuple[list[list[int]], LLM]:
    if spec_graphs is not None:
        monkeypatch.setenv("MXSERVE_SPEC_GRAPHS", spec_graphs)
    spec = {"method": "dspark", "num_speculative_tokens": k} if k else None
    llm = LLM(device="cuda", max_model_len=512, kernel_overrides=ALL_TRITON, speculative_config=spec, progress=False)
    params = SamplingParams(max_tokens=48, temperature=0, ignore_eos=True)
    return [list(o.outputs[0].token_ids) for o in llm.generate(prompts, params)], llm


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs CUDA")
@pytest.mark.parametrize("k,lookahead", [(3, "0"), (7, "0"), (3, "1")])
def test_gpu_graphed_speculation_equals_plain_and_the_eager_step(monkeypatch, k, lookahead):
    monkeypatch.setenv("MXSERVE_SPEC_LOOKAHEAD", lookahead)
    prompts = [[0, *range(7, 7 + n)] for n in (3, 17, 40)]
    want, _ = _generate(monkeypatch, prompts, None, 0)
    got, graphed = _generate(monkeypatch, prompts, "auto", k)
    graphs = graphed.engine.runner.step_graphs
    assert graphs is not None and graphs.unavailable is None, dict(graphed.engine.runner.eager_stats.counts)
    assert graphs.num_steps > 0 and (graphs.num_ahead_used > 0) == (lookahead == "1")  # the draft lookahead
    assert got == want
    eager_tokens, eager = _generate(monkeypatch, prompts, "0", k)
    assert eager_tokens == want
    assert graphed.engine.spec_decode_stats.as_dict() == eager.engine.spec_decode_stats.as_dict()


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs CUDA")
@pytest.mark.parametrize(("max_rows", "budget"), [("64", 64), ("512", 256)])
def test_gpu_large_batch_cuts_drafts_and_replays_instead_of_running_eager(monkeypatch, max_rows, budget):
    """24 requests at K = 7 would verify 192 rows. With 64-row verify buckets (the default) the scheduler
    cuts the drafts (64 // 24 − 1 = 1); with 512 and a 256-token step budget (drafts count in it)
    steps verify more than 64 rows. Either way the steps replay the graphs (the serving sweep's N = 64
    ran every step eager before, ~80 ms each). Prompts arrive in chunks beside decodes, so prefill
    chunks run eager beside graphed decodes. Tokens equal plain decoding."""
    prompts = [[0, *range(7, 7 + n)] for n in range(3, 51, 2)]
    monkeypatch.setenv("MXSERVE_SPEC_GRAPHS", "auto")
    monkeypatch.setenv("MXSERVE_SPEC_VERIFY_MAX_ROWS", max_rows)
    params = SamplingParams(max_tokens=32, temperature=0, ignore_eos=True)
    opts = dict(device="cuda", max_model_len=512, kernel_overrides=ALL_TRITON, progress=False,
                max_num_batched_tokens=budget, long_prefill_token_threshold=32)
    want = [list(o.outputs[0].token_ids) for o in LLM(**opts).generate(prompts, params)]
    spec = LLM(**opts, speculative_config={"method": "dspark", "num_speculative_tokens": 7})
    got = [list(o.outputs[0].token_ids) for o in spec.generate(prompts, params)]
    assert got == want
    runner = spec.engine.runner
    reasons = dict(runner.eager_stats.counts)
    assert runner.step_graphs.unavailable is None and not any("largest bucket" in r for r in reasons), reasons
    assert runner.step_graphs.num_steps > 0 and spec.engine.spec_decode_stats.num_verifies > 0
    largest = max(runner.step_graphs.captured_buckets()["verify"])
    assert largest <= 64 if max_rows == "64" else largest > 64


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs CUDA")
def test_gpu_prefill_rows_in_the_speculative_step_are_lossless(monkeypatch):
    """MXSERVE_PREFILL_ROWS=1 at K = 7: prompts in 16-token chunks join the graphed verify as committed
    rows (a 64-token step budget, so every step fits the 64-row bucket); the greedy tokens equal plain
    decoding's, and no prefill chunk ran eager."""
    prompts = [[0, *range(7, 7 + n)] for n in (3, 40, 9, 25, 2, 17)]
    params = SamplingParams(max_tokens=32, temperature=0, ignore_eos=True)
    opts = dict(device="cuda", max_model_len=512, kernel_overrides=ALL_TRITON, progress=False,
                max_num_batched_tokens=64, long_prefill_token_threshold=16)
    want = [list(o.outputs[0].token_ids) for o in LLM(**opts).generate(prompts, params)]
    monkeypatch.setenv("MXSERVE_SPEC_GRAPHS", "auto")
    monkeypatch.setenv("MXSERVE_PREFILL_ROWS", "1")
    spec = LLM(**opts, speculative_config={"method": "dspark", "num_speculative_tokens": 7})
    got = [list(o.outputs[0].token_ids) for o in spec.generate(prompts, params)]
    assert got == want
    runner = spec.engine.runner
    reasons = dict(runner.eager_stats.counts)
    assert runner.num_prefill_row_steps > 0 and not any("prefill" in r for r in reasons), reasons
