"""The engine's kernel front door for the MoE and attention backends (mxserve.model.kernel_selection).

* the reference is the default everywhere (no override: every KernelSet slot is the torch twin);
* forcing `attention=triton,moe=triton` through `LLM(..., kernel_overrides=...)` on the CPU runs the
  Triton kernels under the interpreter (the documented TRITON_INTERPRET=1 allowance, said in the
  log) and gives the reference's greedy tokens in exact numerics; so does forcing `hc=triton`
  (the hyper-connection kernels) alone;
* `mxserve verify`'s kernels stage reports those choices and compares every MoE layer;
* unknown ops / backends are refused with the name and what is known, from the config and from
  the MXSERVE_KERNEL_OVERRIDES environment variable.
"""

from __future__ import annotations

import logging
import os

import pytest
import torch

from mxserve import LLM, SamplingParams
from mxserve.model.kernel_selection import resolve_overrides
from mxserve.model.kernel_set import REFERENCE_KERNELS
from mxserve.verify.stage_kernels import MOE_MAX_REL, compare_moe_layers, engine_selection

pytest.importorskip("triton")

ON_CPU = not torch.cuda.is_available()


def _prompts(vocab: int) -> list[list[int]]:
    gen = torch.Generator().manual_seed(11)
    # 17 tokens: CSA (ratio 4) and HCA (ratio 16) entries emitted; 4 tokens: a short one beside it.
    # Small on purpose (the interpreter costs ~0.1 s per launch); whole-model CSA selection parity
    # is tests/kernels/attention_ops/test_model_triton_attention.py
    return [[0, *torch.randint(2, vocab, (n - 1,), generator=gen).tolist()] for n in (17, 4)]


def test_reference_is_the_default(tiny_all, monkeypatch):
    monkeypatch.delenv("MXSERVE_KERNEL_OVERRIDES", raising=False)
    llm = LLM(str(tiny_all), numerics="exact", max_model_len=64, progress=False)
    kernels = llm.engine.model.kernels
    for slot in ("route", "moe_experts", "expert_ffn", "sparse_attention", "topk", "q_norm_rope", "kv_insert",
                 "compressor_emit", "indexer_scores_cache", "hc_pre", "hc_post", "hc_head"):
        assert getattr(kernels, slot) is getattr(REFERENCE_KERNELS, slot), slot
        assert kernels.label(slot) == "reference"


@pytest.mark.skipif(ON_CPU and os.environ.get("TRITON_INTERPRET") != "1", reason="CPU needs the interpreter")
def test_forced_triton_moe_and_attention_match_reference_greedy_tokens(tiny_all, caplog):
    ref = LLM(str(tiny_all), numerics="exact", max_model_len=64, progress=False)  # device auto: CUDA on a GPU
    prompts = _prompts(ref.engine.model_config.vocab_size)
    params = SamplingParams(max_tokens=2, temperature=0, ignore_eos=True)
    want = [o.outputs[0].token_ids for o in ref.generate(prompts, params)]
    with caplog.at_level(logging.INFO, logger="mxserve.engine"):
        llm = LLM(str(tiny_all), numerics="exact", max_model_len=64, progress=False,
                  kernel_overrides={"attention": "triton", "moe": "triton"})
    log = caplog.text
    how = "forced; TRITON_INTERPRET=1 interpreter allowance" if ON_CPU else "forced; "
    assert f"attention backend: triton ({how}" in log
    assert f"moe backend: triton for all 6 layers ({how}" in log
    assert "copy each layer's expert weights" in log  # the StackedExperts memory note
    # (CUDA: exact numerics, tokens equal as in tests/kernels/attention_ops/test_gpu_model_attention.py)
    kernels = llm.engine.model.kernels
    assert kernels.label("sparse_attention") == "triton" and kernels.label("moe_experts") == "triton"
    assert kernels.sparse_attention is not REFERENCE_KERNELS.sparse_attention
    got = [o.outputs[0].token_ids for o in llm.generate(prompts, params)]
    assert got == want
    # `mxserve verify`'s kernels stage sees and checks the same choices
    assert engine_selection(llm.engine.model) == {"linear": "reference", "moe": "triton",
                                                  "moe shared expert": "reference", "attention": "triton",
                                                  "hc": "reference"}
    moe = compare_moe_layers(llm.engine.model)
    assert len(moe) == 6 and all(same for *_, same in moe)
    assert max(err for _, err, _ in moe) <= MOE_MAX_REL["exact"], moe


@pytest.mark.skipif(ON_CPU and os.environ.get("TRITON_INTERPRET") != "1", reason="CPU needs the interpreter")
def test_forced_triton_hc_matches_reference_greedy_tokens(tiny_all, caplog):
    ref = LLM(str(tiny_all), numerics="exact", max_model_len=64, progress=False)
    prompts = _prompts(ref.engine.model_config.vocab_size)[1:]  # the 4-token prompt (~0.5 s per interpreted call)
    params = SamplingParams(max_tokens=2, temperature=0, ignore_eos=True)
    want = [o.outputs[0].token_ids for o in ref.generate(prompts, params)]
    with caplog.at_level(logging.INFO, logger="mxserve.engine"):
        llm = LLM(str(tiny_all), numerics="exact", max_model_len=64, progress=False, kernel_overrides={"hc": "triton"})
    how = "forced; TRITON_INTERPRET=1 interpreter allowance" if ON_CPU else "forced; fp64 mixes"
    assert f"hc backend: triton ({how}" in caplog.text
    kernels = llm.engine.model.kernels
    assert {kernels.label(op) for op in ("hc_pre", "hc_post", "hc_head")} == {"triton"}
    assert kernels.hc_pre is not REFERENCE_KERNELS.hc_pre and kernels.label("sparse_attention") == "reference"
    assert engine_selection(llm.engine.model)["hc"] == "triton"
    assert [o.outputs[0].token_ids for o in llm.generate(prompts, params)] == want


def test_unknown_backend_and_op_are_refused(monkeypatch):
    with pytest.raises(ValueError, match=r"kernel_overrides\['moe'\]='cutlass': unknown backend.*triton-w4a8"):
        LLM(kernel_overrides={"moe": "cutlass"}, progress=False)
    with pytest.raises(ValueError, match=r"kernel_overrides\['attention'\]='flash'.*\['reference', 'triton'\]"):
        LLM(kernel_overrides={"attention": "flash"}, progress=False)
    env = {"MXSERVE_KERNEL_OVERRIDES": "linear=triton,moe=triton,attention=triton"}
    assert resolve_overrides({}, env) == {"linear": "triton", "moe": "triton", "attention": "triton"}
    assert resolve_overrides({"moe": "reference"}, env)["moe"] == "reference"  # the config wins
    with pytest.raises(ValueError, match=r"MXSERVE_KERNEL_OVERRIDES: attention='fa3': unknown backend"):
        resolve_overrides({}, {"MXSERVE_KERNEL_OVERRIDES": "attention=fa3"})
    assert resolve_overrides({}, {"MXSERVE_KERNEL_OVERRIDES": "hc=triton"}) == {"hc": "triton"}
    with pytest.raises(ValueError, match=r"kernel_overrides\['hc'\]='fused'.*\['reference', 'triton'\]"):
        LLM(kernel_overrides={"hc": "fused"}, progress=False)
    with pytest.raises(ValueError, match=r"MXSERVE_KERNEL_OVERRIDES: unknown op 'topk'"):
        resolve_overrides({}, {"MXSERVE_KERNEL_OVERRIDES": "topk=triton"})
