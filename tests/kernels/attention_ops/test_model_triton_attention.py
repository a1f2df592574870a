"""The whole tiny model (sliding, CSA with indexer, HCA layers) with the Triton attention kernels
selected, under the interpreter, against the all-reference model.

* exact numerics (fp32 caches, the kernels' FP32 row modes), every attention op Triton: the same
  greedy tokens and logits within max|Δlogit| / max|logit| <= 1e-5 (the kernels accumulate the
  attention and the indexer scores in fp32, the reference in fp64).
* faithful numerics (fp8_ds_mla window/compressed caches, FP8 indexer keys), the cache-writing
  and RoPE ops Triton (q RMS + RoPE, RoPE/inverse RoPE, window-KV insert, compressor emit,
  top-k): logits bit-identical to the reference. The fp8_ds_mla *readers* (attention, indexer)
  are compared per kernel in tests/kernels/{sparse_attention,indexer}: in faithful mode this
  random tiny model is chaotic (1e-7 relative noise in the attention output moves its logits by
  0.3 through bf16/FP8 re-quantization and MoE routing), so a whole-model tolerance says nothing.
The prompt (36 tokens) makes CSA selection a real top-8 of 9 candidates and HCA emit entries.
"""

from __future__ import annotations

import dataclasses
import os

import pytest
import torch

pytest.importorskip("triton")

from mxserve.kernels.attention_chooser import BIT_EXACT_OPS, attention_ops
from mxserve.model.checkpoint import CheckpointReader
from mxserve.model.deepseek_v4 import DeepseekV4Model
from mxserve.model.greedy import greedy_generate
from mxserve.model.kernel_set import REFERENCE_KERNELS


@pytest.mark.slow  # ~25-50 s each on the 2-core CI machine (interpreted kernels over 6 layers)
@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                    reason="CPU tensors need the Triton interpreter (the GPU twin: test_gpu_model_attention.py)")
@pytest.mark.parametrize("numerics", ["exact", "faithful"])
def test_tiny_model_triton_attention_equals_reference(tiny_all, numerics):
    reader = CheckpointReader(tiny_all)
    model = DeepseekV4Model(reader.config, reader.load(progress=False), numerics=numerics, resident_weights=True)
    prompt = [0, *torch.randint(2, reader.config.vocab_size, (35,), generator=torch.Generator().manual_seed(3)).tolist()]
    num_new = 2 if numerics == "exact" else 1  # exact: prefill + one decode step; faithful: prefill
    ref_tokens, ref_logits = greedy_generate(model, prompt, num_new)
    ops = attention_ops("triton")
    if numerics == "faithful":
        ops = {name: ops[name] for name in BIT_EXACT_OPS}
    model.set_kernels(dataclasses.replace(REFERENCE_KERNELS, **ops))
    tokens, logits = greedy_generate(model, prompt, num_new)
    assert tokens == ref_tokens
    if numerics == "faithful":
        assert torch.equal(logits, ref_logits), f"max |Δ| {float((logits - ref_logits).abs().max()):.3e}"
    else:
        err = float(((logits - ref_logits).abs().amax(dim=-1) / ref_logits.abs().amax(dim=-1)).max())
        assert err <= 1e-5, f"logits differ by {err:.3e} (relative to max |logit|)"
