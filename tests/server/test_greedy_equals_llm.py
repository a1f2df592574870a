"""Greedy outputs from the server equal `LLM.generate` for the same prompts (text and tokens),
and a chat request equals `LLM.chat` on the same messages (chat mode)."""

from __future__ import annotations

import pytest

from mxserve.engine.llm import LLM
from mxserve.engine.sampling_params import SamplingParams
from tests.server.live import MODEL_NAME

PROMPTS = ["In the beginning", "And the LORD said unto Moses", "Blessed are the"]
MAX_TOKENS = 8


@pytest.fixture(scope="module")
def llm() -> LLM:
    return LLM(device="cpu", max_model_len=1024, kv_cache_memory=256 << 20, progress=False)


def test_completions_equal_llm_generate(llm, openai_client):
    expected = llm.generate(PROMPTS, SamplingParams(max_tokens=MAX_TOKENS, temperature=0, logprobs=0))
    served = openai_client.completions.create(model=MODEL_NAME, prompt=PROMPTS, max_tokens=MAX_TOKENS, temperature=0,
                                              logprobs=0)
    for want, got in zip(expected, served.choices, strict=True):
        sample = want.outputs[0]
        assert got.text == sample.text
        assert got.logprobs.tokens == [llm.tokenizer.decode([t]) for t in sample.token_ids]
        assert got.logprobs.token_logprobs == pytest.approx([r.logprob for r in sample.logprobs], abs=0, rel=0)
        assert got.finish_reason == sample.finish_reason


def test_streamed_completion_equals_llm_generate(llm, openai_client):
    expected = llm.generate(PROMPTS[1], SamplingParams(max_tokens=MAX_TOKENS, temperature=0))[0].outputs[0].text
    chunks = openai_client.completions.create(model=MODEL_NAME, prompt=PROMPTS[1], max_tokens=MAX_TOKENS,
                                              temperature=0, stream=True)
    assert "".join(c.choices[0].text for c in chunks if c.choices) == expected


def test_chat_equals_llm_chat(llm, openai_client):
    messages = [{"role": "user", "content": "Who was Moses?"}]
    expected = llm.chat(messages, SamplingParams(max_tokens=MAX_TOKENS, temperature=0), thinking=False)
    served = openai_client.chat.completions.create(model=MODEL_NAME, messages=messages, max_tokens=MAX_TOKENS,
                                                   temperature=0, reasoning_effort="none", logprobs=True)
    tokens = [t.token for t in served.choices[0].logprobs.content]
    assert tokens == [llm.tokenizer.decode([t]) for t in expected.outputs[0].token_ids]
    assert served.usage.prompt_tokens == len(expected.prompt_token_ids)
    assert served.choices[0].message.content == expected.outputs[0].text
