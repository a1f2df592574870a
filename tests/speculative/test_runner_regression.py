"""Regression found while building issue 13: a step whose only chunk is a mid-prompt prefill chunk
(no row needs logits) skipped the model forward, so a single long prompt prefilled in chunks
without prompt_logprobs left holes in the caches and generated wrong tokens."""

from __future__ import annotations

from mxserve import LLM, SamplingParams
from mxserve.model.checkpoint import CheckpointReader
from mxserve.model.deepseek_v4 import DeepseekV4Model
from mxserve.model.greedy import greedy_generate


def test_lone_mid_prompt_chunks_are_computed(tiny_0731):
    reader = CheckpointReader(tiny_0731)
    model = DeepseekV4Model(reader.config, reader.load(progress=False), resident_weights=True)
    prompt = list(range(2, 42))  # 40 tokens, three chunks of at most 16
    want = greedy_generate(model, prompt, 3)[0][len(prompt):]
    for spec in (None, {"num_speculative_tokens": 2}):
        llm = LLM(str(tiny_0731), max_model_len=64, max_num_batched_tokens=16, long_prefill_token_threshold=16,
                  progress=False, speculative_config=spec)
        got = llm.generate([prompt], SamplingParams(max_tokens=3, temperature=0, ignore_eos=True))[0]
        assert got.outputs[0].token_ids == want, spec
