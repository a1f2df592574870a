"""On a GPU, a decode step whose independent parts run on side lanes (MXSERVE_DECODE_BRANCHES,
model/decode_branches.py) computes exactly what the one-stream step computes.

The packaged default model (sliding, CSA and HCA layers, a shared expert) with every Triton kernel
(hc included):
* one eager `decode_forward` step of 3 rows + 1 padding row at positions that complete CSA and HCA
  entries, branches on against off: the logits and every cache byte equal;
* greedy 64 tokens through CUDA graphs (5 prompts, bucket 8), branches on against off, also with
  the hc side stream on beside them: the tokens and every sampled logit equal, and graphs with
  branches equal enforce_eager with branches;
* no fork is left unjoined after a step.
(CPU: the branched code path runs inline, covered by tests/model/test_decode_path.py.)"""

from __future__ import annotations

import pytest
import torch

from mxserve import LLM
from mxserve.kernels import side_streams
from mxserve.kernels.chooser import ALL_TRITON
from mxserve.model.decode_branches import BRANCHES_ENV
from tests.engine.test_cuda_graphs import _greedy
from tests.model.test_decode_glue_gpu import assert_same_step, step_with_switch_on_and_off

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

PROMPTS = [[0, *range(7, 7 + n)] for n in (3, 17, 40, 9, 66)]


def test_gpu_branched_decode_step_is_bit_identical(monkeypatch):
    llm = LLM(device="cuda", max_model_len=512, progress=False, kernel_overrides=ALL_TRITON)

    def all_joined():
        assert side_streams.pending() == [], "a fork of the step was never joined"

    assert_same_step(*step_with_switch_on_and_off(llm.engine.model, monkeypatch, BRANCHES_ENV, after_on=all_joined))


def _graphed(num_tokens: int, **options) -> tuple[list[list[int]], list[torch.Tensor]]:
    llm = LLM(device="cuda", max_model_len=512, progress=False, kernel_overrides=ALL_TRITON, **options)
    tokens, logits = _greedy(llm, PROMPTS, num_tokens)
    if not options.get("enforce_eager"):
        graphs = llm.engine.runner.decode_graphs
        assert graphs is not None and graphs.unavailable is None and graphs.num_replays > 0, "no graph replayed"
    assert side_streams.pending() == []
    return tokens, logits


def _assert_same(a: tuple, b: tuple, what: str) -> None:
    assert a[0] == b[0], f"{what}: tokens differ"
    assert len(a[1]) == len(b[1])
    for step, (x, y) in enumerate(zip(a[1], b[1], strict=True)):
        assert torch.equal(x, y), f"{what}, step {step}: logits differ, max |Δ| {(x - y).abs().max():.3e}"


def test_gpu_branches_give_the_same_bits_in_graphs(monkeypatch):
    monkeypatch.setenv(BRANCHES_ENV, "0")
    off = _graphed(64)
    monkeypatch.setenv(BRANCHES_ENV, "1")
    on = _graphed(64)
    _assert_same(on, off, "branches on vs off")
    _assert_same(_graphed(64, enforce_eager=True), on, "branches: eager vs graphs")
    monkeypatch.setenv("MXSERVE_HC_SIDE_STREAM", "1")
    _assert_same(_graphed(64), off, "branches + hc side stream vs one stream")
