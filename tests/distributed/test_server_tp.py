"""The OpenAI server on a TP=2 engine (two gloo CPU ranks, scheduler in the server process):
greedy completions, streamed and not, equal one process's greedy tokens; chat answers; the engine
rejects configs that cannot split before starting any process."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from mxserve import default_model_path
from mxserve.config.engine_config import EngineConfig
from mxserve.distributed import ShardingError
from mxserve.engine.llm import LLM
from mxserve.engine.tokenizer import Tokenizer
from mxserve.model.greedy import greedy_generate
from mxserve.server.app import build_app, build_engine
from mxserve.server.metrics import ServerMetrics
from mxserve.server.state import ServerConfig
from tests.distributed.conftest import reference_model

PROMPTS = ["And God said", "Blessed are the"]
MAX_TOKENS = 6


def test_server_with_tensor_parallel_ranks_equals_one_process():
    engine_config = EngineConfig(device="cpu", numerics="exact", max_model_len=256, max_num_seqs=4,
                                 kv_cache_memory=128 << 20, tensor_parallel_size=2)
    server_config = ServerConfig(served_model_names=("tp",), max_body_bytes=1 << 20)
    metrics = ServerMetrics()
    engine = build_engine(engine_config, server_config, metrics)
    try:
        tokenizer = Tokenizer.from_dir(default_model_path())
        reference = reference_model(default_model_path())
        expected = []
        for prompt in PROMPTS:
            ids = [reference.config.bos_token_id, *tokenizer.encode(prompt)]
            expected.append(tokenizer.decode(greedy_generate(reference, ids, MAX_TOKENS)[0][len(ids):]))
        with TestClient(build_app(engine, server_config, metrics)) as client:
            body = {"model": "tp", "prompt": PROMPTS, "max_tokens": MAX_TOKENS, "temperature": 0}
            reply = client.post("/v1/completions", json=body)
            assert reply.status_code == 200, reply.text
            assert [c["text"] for c in sorted(reply.json()["choices"], key=lambda c: c["index"])] == expected
            with client.stream("POST", "/v1/completions", json={**body, "prompt": PROMPTS[0], "stream": True}) as s:
                lines = [line for line in s.iter_lines() if line.startswith("data: {")]
            chunks = [json.loads(line.removeprefix("data: ")) for line in lines]
            assert "".join(c["choices"][0]["text"] for c in chunks if c["choices"]) == expected[0]
            chat = client.post("/v1/chat/completions", json={"model": "tp", "max_tokens": 4, "temperature": 0,
                                                             "messages": [{"role": "user", "content": "Who was Moses?"}]})
            assert chat.status_code == 200 and chat.json()["usage"]["completion_tokens"] >= 1, chat.text
    finally:
        engine.engine.close()
    assert all(not p.is_alive() for p in engine.engine.executor._processes)


def test_an_unsplittable_config_fails_before_any_process_starts():
    with pytest.raises(ShardingError, match="num_attention_heads=4 is not divisible by 3"):
        LLM(device="cpu", tensor_parallel_size=3, progress=False)
    with pytest.raises(ValueError, match="tensor_parallel_size=0"):
        EngineConfig(tensor_parallel_size=0)
