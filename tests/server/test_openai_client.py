"""The official `openai` client against the live server: completions and chat, streamed and not,
with logprobs; thinking mode's reasoning; tools in the prompt; n and seeds."""

from __future__ import annotations

import math

from tests.server.conftest import wait_until_idle
from tests.server.live import MODEL_NAME

PROMPT = "In the beginning"
MESSAGES = [{"role": "user", "content": "Who was Moses?"}]


def test_models_lists_the_served_name(openai_client):
    models = openai_client.models.list()
    assert [m.id for m in models.data] == [MODEL_NAME]


def test_completion_with_logprobs(openai_client):
    out = openai_client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=6, temperature=0, logprobs=3)
    choice = out.choices[0]
    assert choice.finish_reason == "length"
    assert out.usage.completion_tokens == 6 and out.usage.prompt_tokens == 5  # BOS + 4 tokens
    lp = choice.logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 6
    assert "".join(lp.tokens) == choice.text
    for token, logprob, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs, strict=True):
        assert logprob <= 0 and math.isfinite(logprob)
        assert top[token] == logprob and max(top.values()) == logprob  # greedy: the chosen token is the top one
        assert 3 <= len(top) <= 4


def test_completion_echo_scores_the_prompt(openai_client):
    out = openai_client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=1, temperature=0, logprobs=1,
                                           echo=True)
    lp = out.choices[0].logprobs
    assert out.choices[0].text.startswith(PROMPT)
    assert len(lp.token_logprobs) == 5 + 1  # prompt (BOS first) + one generated token
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert all(x is not None and x <= 0 for x in lp.token_logprobs[1:])


def test_completion_stream_with_usage(openai_client):
    stream = openai_client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=5, temperature=0,
                                              stream=True, stream_options={"include_usage": True}, logprobs=1)
    chunks = list(stream)
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["length"]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 5
    whole = openai_client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=5, temperature=0)
    assert text == whole.choices[0].text
    streamed_tokens = [t for c in chunks if c.choices and c.choices[0].logprobs for t in c.choices[0].logprobs.tokens]
    assert len(streamed_tokens) == 5


def test_completion_batch_prompts_and_n(openai_client):
    out = openai_client.completions.create(model=MODEL_NAME, prompt=[PROMPT, "And the"], max_tokens=3,
                                           temperature=0.8, n=2, seed=7)
    assert [c.index for c in out.choices] == [0, 1, 2, 3]
    again = openai_client.completions.create(model=MODEL_NAME, prompt=[PROMPT, "And the"], max_tokens=3,
                                             temperature=0.8, n=2, seed=7)
    assert [c.text for c in out.choices] == [c.text for c in again.choices]  # seeded: replayable
    assert out.usage.completion_tokens == 12
    ids = openai_client.completions.create(model=MODEL_NAME, prompt=[[0, 54, 91], [0, 54]], max_tokens=2,
                                           temperature=0)
    assert len(ids.choices) == 2 and ids.usage.prompt_tokens == 5


def test_chat_with_logprobs(openai_client):
    out = openai_client.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, max_tokens=6, temperature=0,
                                                logprobs=True, top_logprobs=2, reasoning_effort="none")
    choice = out.choices[0]
    assert choice.message.role == "assistant" and choice.finish_reason == "length"
    assert len(choice.logprobs.content) == 6 == out.usage.completion_tokens
    assert all(len(t.top_logprobs) == 2 and t.logprob <= 0 for t in choice.logprobs.content)
    assert "".join(t.token for t in choice.logprobs.content) == choice.message.content


def test_chat_stream_deltas_match_the_whole_answer(openai_client):
    kwargs = dict(model=MODEL_NAME, messages=MESSAGES, max_tokens=8, temperature=0,
                  extra_body={"chat_template_kwargs": {"thinking": False}})
    whole = openai_client.chat.completions.create(**kwargs)
    chunks = list(openai_client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kwargs))
    assert chunks[0].choices[0].delta.role == "assistant"
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert content == whole.choices[0].message.content
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == whole.choices[0].finish_reason
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens


def test_thinking_mode_returns_reasoning_separately(openai_client, client):
    # The default (no reasoning_effort) is thinking mode; the tiny model never closes </think> within
    # a few tokens, so everything it writes is reasoning.
    out = client.post("/v1/chat/completions", json={"messages": MESSAGES, "max_tokens": 6, "temperature": 0}).json()
    message = out["choices"][0]["message"]
    assert message["reasoning_content"] and message["content"] is None
    streamed = list(openai_client.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, max_tokens=6,
                                                          temperature=0, stream=True, reasoning_effort="high"))
    reasoning = "".join(getattr(c.choices[0].delta, "reasoning_content", None) or "" for c in streamed if c.choices)
    assert reasoning == message["reasoning_content"]
    # chat_template_kwargs={"enable_thinking": False} switches it off again
    off = client.post("/v1/chat/completions", json={"messages": MESSAGES, "max_tokens": 4, "temperature": 0,
                                                    "chat_template_kwargs": {"enable_thinking": False}}).json()
    assert "reasoning_content" not in off["choices"][0]["message"]


def test_tools_are_encoded_into_the_prompt(openai_client, client):
    tools = [{"type": "function", "function": {"name": "get_verse", "description": "Look up a verse",
                                               "parameters": {"type": "object",
                                                              "properties": {"ref": {"type": "string"}}}}}]
    with_tools = client.post("/tokenize", json={"messages": MESSAGES}).json()["count"]
    out = openai_client.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, tools=tools, max_tokens=4,
                                                temperature=0, reasoning_effort="none")
    assert out.usage.prompt_tokens > with_tools + 20  # the tools block went into the prompt
    assert out.choices[0].finish_reason in ("length", "stop", "tool_calls")


def test_requests_leave_no_pages_behind(live, openai_client):
    openai_client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=2)
    wait_until_idle(live)
