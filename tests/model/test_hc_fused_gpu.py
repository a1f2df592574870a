"""On a GPU, MXSERVE_HC_FUSED=1 (hc_pre + block norm and hc_head + final norm in 2 launches instead of
4, `kernels/hyper_connection/triton.py`) computes what the unfused launches compute.

The packaged default model (hc 4, D 256: both fusions apply) with every Triton kernel, hc included:
* one eager `decode_forward` step of 3 rows + 1 padding row, fused on against off: the logits and
  every cache byte equal;
* greedy 32 tokens through CUDA graphs (5 prompts), fused on against off: the tokens and every sampled
  logit equal (the switch is read while the step is captured).
(The sums' reduction trees differ from the unfused kernels' only in layout, which could move an
fp32 rho or norm scale by an ulp with probability ~2^-29 per value: a failure here is a real
difference to look at, not noise to retry.) CPU: tests/kernels/hyper_connection/test_hc_triton.py
and tests/model/test_decode_path.py."""

from __future__ import annotations

import pytest
import torch

from mxserve import LLM
from mxserve.kernels.chooser import ALL_TRITON
from tests.engine.test_cuda_graphs import _greedy
from tests.model.test_decode_glue_gpu import assert_same_step, step_with_switch_on_and_off

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

FUSED_ENV = "MXSERVE_HC_FUSED"
PROMPTS = [[0, *range(7, 7 + n)] for n in (3, 17, 40, 9, 66)]


def test_gpu_fused_hc_decode_step_is_bit_identical(monkeypatch):
    llm = LLM(device="cuda", max_model_len=512, progress=False, kernel_overrides=ALL_TRITON)
    assert_same_step(*step_with_switch_on_and_off(llm.engine.model, monkeypatch, FUSED_ENV))


def test_gpu_fused_hc_gives_the_same_tokens_in_graphs(monkeypatch):
    runs = {}
    for fused in ("0", "1"):
        monkeypatch.setenv(FUSED_ENV, fused)
        llm = LLM(device="cuda", max_model_len=512, progress=False, kernel_overrides=ALL_TRITON)
        runs[fused] = _greedy(llm, PROMPTS, 32)
        graphs = llm.engine.runner.decode_graphs
        assert graphs is not None and graphs.unavailable is None and graphs.num_replays > 0, "no graph replayed"
        del llm
    (tokens_off, logits_off), (tokens_on, logits_on) = runs["0"], runs["1"]
    assert tokens_on == tokens_off
    for i, (a, b) in enumerate(zip(logits_on, logits_off, strict=True)):
        assert torch.equal(a, b), f"step {i}: logits differ, max |Δ| {(a - b).abs().max():.3e}"
