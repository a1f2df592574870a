"""Bad input never yields a 5xx or kills the server: each row is (what, method, path, body or raw
bytes, headers, expected status); every answer must carry an OpenAI error object, and the server
must still answer /health and a real request afterwards."""

from __future__ import annotations

import httpx
import pytest

from tests.server.conftest import wait_until_idle
from tests.server.live import API_KEY

CHAT = "/v1/chat/completions"
COMP = "/v1/completions"
USER = [{"role": "user", "content": "hi"}]
LONG_TEXT = "And it came to pass " * 400  # > 1024 tokens (the live server's max_model_len)
JSON = {"content-type": "application/json"}

CASES = [
    ("malformed json", COMP, b'{"prompt": "x", ', JSON, 400),
    ("not an object", COMP, b'["prompt"]', JSON, 400),
    ("invalid utf-8", COMP, b'{"prompt": "\xff\xfe"}', JSON, 400),
    ("invalid utf-8 in chat", CHAT, b'{"messages": [{"role": "user", "content": "\xc3\x28"}]}', JSON, 400),
    ("empty body", COMP, b"", JSON, 400),
    ("missing prompt", COMP, {"max_tokens": 2}, None, 400),
    ("prompt wrong type", COMP, {"prompt": 12}, None, 400),
    ("prompt nested wrong", COMP, {"prompt": [[1, "a"]]}, None, 400),
    ("empty prompt", COMP, {"prompt": ""}, None, 400),
    ("empty prompt list", COMP, {"prompt": []}, None, 400),
    ("token id outside vocab", COMP, {"prompt": [0, 999999]}, None, 400),
    ("negative token id", COMP, {"prompt": [0, -1]}, None, 400),
    ("max_tokens wrong type", COMP, {"prompt": "x", "max_tokens": "many"}, None, 400),
    ("max_tokens negative", COMP, {"prompt": "x", "max_tokens": -1}, None, 400),
    ("max_tokens zero without echo", COMP, {"prompt": "x", "max_tokens": 0}, None, 400),
    ("huge max_tokens", COMP, {"prompt": "x", "max_tokens": 10**12}, None, 400),
    ("huge max_tokens bigint", COMP, {"prompt": "x", "max_tokens": 10**40}, None, 400),
    ("huge chat max_tokens", CHAT, {"messages": USER, "max_tokens": 2**31}, None, 400),
    ("temperature negative", COMP, {"prompt": "x", "temperature": -1}, None, 400),
    ("temperature nan", COMP, b'{"prompt": "x", "temperature": NaN}', JSON, 400),
    ("temperature inf", COMP, b'{"prompt": "x", "temperature": Infinity}', JSON, 400),
    ("top_p zero", COMP, {"prompt": "x", "top_p": 0}, None, 400),
    ("top_p above one", COMP, {"prompt": "x", "top_p": 1.5}, None, 400),
    ("top_k below -1", COMP, {"prompt": "x", "top_k": -5}, None, 400),
    ("min_p above one", COMP, {"prompt": "x", "min_p": 2}, None, 400),
    ("n zero", COMP, {"prompt": "x", "n": 0}, None, 400),
    ("n huge", COMP, {"prompt": "x", "n": 10**6}, None, 400),
    ("logprobs too many", COMP, {"prompt": "x", "logprobs": 21}, None, 400),
    ("seed too big", COMP, {"prompt": "x", "seed": 2**70}, None, 400),
    ("stop empty string", COMP, {"prompt": "x", "stop": [""]}, None, 400),
    ("stop wrong type", COMP, {"prompt": "x", "stop": 5}, None, 400),
    ("suffix", COMP, {"prompt": "x", "suffix": "tail"}, None, 400),
    ("unknown model", COMP, {"prompt": "x", "model": "gpt-5"}, None, 404),
    ("overlong prompt", COMP, {"prompt": LONG_TEXT, "max_tokens": 1}, None, 400),
    ("overlong chat", CHAT, {"messages": [{"role": "user", "content": LONG_TEXT}], "max_tokens": 1}, None, 400),
    ("empty messages", CHAT, {"messages": []}, None, 400),
    ("messages wrong type", CHAT, {"messages": "hi"}, None, 400),
    ("unknown role", CHAT, {"messages": [{"role": "wizard", "content": "hi"}]}, None, 400),
    ("user without content", CHAT, {"messages": [{"role": "user"}]}, None, 400),
    ("image content part", CHAT, {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, None, 400),
    ("tool result without call", CHAT, {"messages": [{"role": "tool", "content": "x", "tool_call_id": "a"}]}, None, 400),
    ("bad tool arguments", CHAT, {"messages": [{"role": "assistant", "tool_calls": [
        {"id": "a", "type": "function", "function": {"name": "f", "arguments": "[1"}}]}]}, None, 400),
    ("tool_choice required", CHAT, {"messages": USER, "tool_choice": "required"}, None, 400),
    ("thinking not a bool", CHAT, {"messages": USER, "chat_template_kwargs": {"thinking": "yes"}}, None, 400),
    ("top_logprobs without logprobs", CHAT, {"messages": USER, "top_logprobs": 2}, None, 400),
    ("chat unknown model", CHAT, {"messages": USER, "model": "nope"}, None, 404),
    ("tokenize neither", "/tokenize", {}, None, 400),
    ("detokenize outside vocab", "/detokenize", {"tokens": [10**9]}, None, 400),
    ("detokenize wrong type", "/detokenize", {"tokens": "abc"}, None, 400),
    ("oversized body", COMP, b'{"prompt": "' + b"a" * (2 << 20) + b'"}', JSON, 413),
    ("no api key", COMP, {"prompt": "x"}, {"authorization": ""}, 401),
    ("wrong api key", COMP, {"prompt": "x"}, {"authorization": "Bearer wrong-key"}, 401),
    ("api key prefix only", COMP, {"prompt": "x"}, {"authorization": f"Bearer {API_KEY[:-1]}"}, 401),
]


@pytest.mark.parametrize("what, path, body, headers, status", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_a_4xx_with_an_openai_error(live, what, path, body, headers, status):
    kwargs = {"content": body} if isinstance(body, bytes) else {"json": body}
    request_headers = {"authorization": f"Bearer {API_KEY}", **(headers or {})}
    if request_headers["authorization"] == "":
        del request_headers["authorization"]
    response = httpx.post(live.base_url + path, headers=request_headers, timeout=60, **kwargs)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]


def test_unknown_fields_are_ignored(client):
    response = client.post(COMP, json={"prompt": "x", "max_tokens": 1, "frobnicate": True, "logit_bias": {}})
    assert response.status_code == 200


def test_unknown_route_and_method(client):
    assert client.get("/v1/nothing").status_code == 404
    assert client.get(COMP).status_code == 405
    assert "error" in client.get("/v1/nothing").json()


def test_server_still_healthy_after_bad_input(live, client):
    assert client.get("/health").status_code == 200
    assert client.post(COMP, json={"prompt": "In", "max_tokens": 1}).status_code == 200
    wait_until_idle(live)
