"""Text-level engine behaviour on the packaged default model: stop strings, chat, streaming."""

from __future__ import annotations

import itertools

import pytest

from mxserve import LLM, SamplingParams


@pytest.fixture(scope="module")
def llm() -> LLM:
    return LLM(max_model_len=512, progress=False)


def test_stop_string_spanning_tokens_ends_the_text_before_it(llm):
    free = llm.generate("And God said", SamplingParams(max_tokens=24, temperature=0))[0].outputs[0]
    text = free.text
    assert len(text) > 12, f"degenerate free run: {text!r}"
    stop = text[5:11]  # six characters from the middle: spans a token boundary in this BPE
    stopped = llm.generate("And God said", SamplingParams(max_tokens=24, temperature=0, stop=[stop]))[0].outputs[0]
    assert stopped.finish_reason == "stop" and stopped.stop_reason == stop
    assert stopped.text == text[: text.index(stop)]
    with_stop = llm.generate("And God said", SamplingParams(max_tokens=24, temperature=0, stop=[stop],
                                                           include_stop_str_in_output=True))[0].outputs[0]
    assert with_stop.text == text[: text.index(stop) + len(stop)]


def test_stop_token_ids_and_max_tokens(llm):
    free = llm.generate("In the beginning", SamplingParams(max_tokens=8, temperature=0))[0].outputs[0]
    assert free.finish_reason == "length" and len(free.token_ids) == 8
    stop_id = free.token_ids[3]
    cut = llm.generate("In the beginning", SamplingParams(max_tokens=8, temperature=0, stop_token_ids=[stop_id]))[0]
    out = cut.outputs[0]
    assert out.finish_reason == "stop" and out.token_ids == free.token_ids[: free.token_ids.index(stop_id) + 1]


def test_chat_uses_the_deepseek_encoding_and_reports_timing(llm):
    reply = llm.chat([{"role": "user", "content": "Who begat Enos?"}], SamplingParams(max_tokens=6, temperature=0))
    ids = reply.prompt_token_ids
    tok = llm.tokenizer
    assert ids[0] == tok.bos_token_id and ids.count(tok.bos_token_id) == 1
    assert tok.token_id("<｜User｜>") in ids and tok.token_id("<｜Assistant｜>") in ids
    assert ids[-1] == tok.token_id("</think>")  # chat mode (thinking off) closes the think block
    assert reply.metrics.ttft_s is not None and reply.metrics.ttft_s >= 0
    assert len(reply.metrics.token_times_s) == len(reply.outputs[0].token_ids)


def test_stream_yields_growing_text_and_utf8_is_never_split(llm):
    seen = []
    for out in llm.stream("And the LORD", SamplingParams(max_tokens=10, temperature=0)):
        seen.append(out.outputs[0].text)
    assert seen and all(b.startswith(a) for a, b in itertools.pairwise(seen))
    assert "\ufffd" not in seen[-1]


def test_n_samples_with_a_seed_are_reproducible(llm):
    params = SamplingParams(n=3, max_tokens=6, temperature=0.9, seed=7)
    first = [o.token_ids for o in llm.generate("The earth", params)[0].outputs]
    again = [o.token_ids for o in llm.generate("The earth", params)[0].outputs]
    assert first == again and len(first) == 3
    assert len({tuple(t) for t in first}) > 1, "three seeded samples were all identical"
