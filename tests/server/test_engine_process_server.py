"""The server with the engine loop in its own process (`ServerConfig.engine_process`).

A representative subset of the server tests runs again here against a live server whose engine
is a `ProcessEngine`: the module's `live` fixture overrides the directory's (threaded) one for the
tests imported below, so their `client` / `openai_client` point at it. Then what only this mode
has: an engine process that dies mid-serving (streams end with "abort", 503 afterwards, the
HTTP side stays up), and `mxserve serve --engine-process` failing to start with its cause.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

from mxserve.engine.process_engine import ProcessEngine
from tests.server.live import API_KEY, LiveServer, start_live_server

# The subset, run against this module's `live` (imported test functions are collected here).
from tests.server.test_greedy_equals_llm import (  # noqa: F401
    llm,
    test_chat_equals_llm_chat,
    test_completions_equal_llm_generate,
    test_streamed_completion_equals_llm_generate,
)
from tests.server.test_lifecycle import (  # noqa: F401
    test_disconnect_mid_stream_aborts_and_frees_pages,
    test_health_and_metrics_are_open,
    test_non_streaming_disconnect_aborts_too,
)
from tests.server.test_load import test_64_streaming_clients_500_requests_with_disconnects  # noqa: F401
from tests.server.test_openai_client import (  # noqa: F401
    test_chat_stream_deltas_match_the_whole_answer,
    test_completion_batch_prompts_and_n,
    test_completion_echo_scores_the_prompt,
    test_completion_stream_with_usage,
    test_completion_with_logprobs,
    test_requests_leave_no_pages_behind,
    test_thinking_mode_returns_reasoning_separately,
)


@pytest.fixture(scope="module")
def live() -> Iterator[LiveServer]:
    server = start_live_server(engine_process=True)
    assert isinstance(server.engine, ProcessEngine)
    yield server
    server.stop()
    assert not server.engine.is_alive and server.engine._process.exitcode == 0  # stopped by the lifespan


def test_the_engine_runs_in_another_process(live):
    assert live.engine.pid not in (None, os.getpid())


def test_a_dead_engine_process_ends_streams_and_answers_503():
    server = start_live_server(api_key=None, engine_process=True, max_model_len=512)
    try:
        with httpx.Client(base_url=server.base_url, timeout=60) as c:
            body = {"prompt": "In the beginning", "max_tokens": 400, "stream": True, "ignore_eos": True}
            with c.stream("POST", "/v1/completions", json=body) as stream:
                lines = stream.iter_lines()
                next(line for line in lines if line.startswith("data: "))
                os.kill(server.engine.pid, signal.SIGKILL)
                rest = [line for line in lines if line.startswith("data: ")]
            assert rest[-1] == "data: [DONE]"
            assert '"finish_reason": "abort"' in rest[-2]
            assert c.get("/health").status_code == 503
            refused = c.post("/v1/completions", json={"prompt": "x", "max_tokens": 1})
            assert refused.status_code == 503 and "SIGKILL" in refused.json()["error"]["message"]
            assert c.get("/v1/models").status_code == 200  # the HTTP side is still up
    finally:
        server.stop()


def test_serve_cli_names_why_the_engine_process_could_not_start(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "mxserve.cli.main", "serve", "--engine-process", "--port", "0", "--device", "cpu",
         "--model", str(tmp_path / "missing")], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 2, result.stderr
    assert "error: the engine failed to start: ConfigError:" in result.stderr and "does not exist" in result.stderr
    assert "Traceback" not in result.stderr


def _gone(pid: int, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_cli_engine_process_pid_is_gone_after_sigterm():
    """`mxserve serve --engine-process`: SIGTERM mid-stream finishes the stream, stops the engine
    process (no orphan left) and exits like the threaded server."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MXSERVE_API_KEY": API_KEY}
    proc = subprocess.Popen(
        [sys.executable, "-m", "mxserve.cli.main", "serve", "--engine-process", "--port", "0", "--device", "cpu",
         "--max-model-len", "256", "--shutdown-grace", "20"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        port = engine_pid = None
        log = []
        deadline = time.monotonic() + 60
        while port is None and time.monotonic() < deadline:
            line = proc.stdout.readline()
            log.append(line)
            if match := re.search(r"engine process (\d+) ready", line):
                engine_pid = int(match.group(1))
            if match := re.search(r"Uvicorn running on http://127\.0\.0\.1:(\d+)", line):
                port = int(match.group(1))
        assert port is not None and engine_pid is not None, "".join(log)
        assert any("KV cache:" in line for line in log), "the engine process's start-up lines reach the user"
        body = {"prompt": "In the beginning", "max_tokens": 12, "stream": True, "ignore_eos": True}
        with httpx.stream("POST", f"http://127.0.0.1:{port}/v1/completions", json=body, timeout=60,
                          headers={"Authorization": f"Bearer {API_KEY}"}) as stream:
            lines = stream.iter_lines()
            next(line for line in lines if line.startswith("data: "))
            proc.send_signal(signal.SIGTERM)
            rest = [line for line in lines if line.startswith("data: ")]
        assert rest[-1] == "data: [DONE]" and '"finish_reason": "length"' in rest[-2]
        assert proc.wait(timeout=60) in (0, -signal.SIGTERM)
        output = "".join(log) + proc.stdout.read()
        assert "shutting down" in output and "Traceback" not in output
        assert _gone(engine_pid), f"engine process {engine_pid} outlived the server"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_the_engine_process_is_the_default_on_a_gpu_only():
    """`mxserve serve` without --engine-process / --no-engine-process: on for CUDA devices, where it was
    measured faster (H200 host, session 14), off on the CPU (slower on the 2-core CI machine)."""
    import torch

    from mxserve.cli.serve_cmd import engine_process_default

    assert engine_process_default("cuda") and engine_process_default("cuda:1")
    assert not engine_process_default("cpu")
    assert engine_process_default("auto") == torch.cuda.is_available()
    assert not engine_process_default("cuda", tensor_parallel_size=2)  # rank processes from the child: untested
