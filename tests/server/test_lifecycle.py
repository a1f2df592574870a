"""Request and server lifecycle: a client that disconnects mid-stream cancels its request and frees
its cache pages; a full queue answers 503; health and metrics; `mxserve serve` as a subprocess
(ephemeral port, loopback) shuts down gracefully on SIGTERM, finishing the stream in flight."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import httpx
import pytest

from tests.server.conftest import wait_until_idle
from tests.server.live import API_KEY, start_live_server


def test_disconnect_mid_stream_aborts_and_frees_pages(live, client):
    body = {"prompt": "In the beginning", "max_tokens": 400, "stream": True, "ignore_eos": True}
    with client.stream("POST", "/v1/completions", json=body) as stream:
        lines = stream.iter_lines()
        first = next(line for line in lines if line.startswith("data: "))
        assert '"text"' in first
    # the connection is closed here; the engine must drop the request well before 400 tokens
    started = time.monotonic()
    wait_until_idle(live, timeout_s=30)
    assert time.monotonic() - started < 30
    metrics = client.get("/metrics").text
    assert re.search(r'mxserve_requests_finished_total\{finish_reason="abort"\} [1-9]', metrics)


def test_non_streaming_disconnect_aborts_too(live):
    body = {"prompt": "In the beginning", "max_tokens": 400, "ignore_eos": True}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(live.api_url + "/completions", json=body, headers={"Authorization": f"Bearer {API_KEY}"},
                   timeout=1.5)
    wait_until_idle(live, timeout_s=30)


def test_health_and_metrics_are_open(live):
    assert httpx.get(live.base_url + "/health").status_code == 200
    text = httpx.get(live.base_url + "/metrics").text
    for name in ("mxserve_http_requests_total", "mxserve_prompt_tokens_total", "mxserve_generation_tokens_total",
                 "mxserve_time_to_first_token_seconds_bucket", "mxserve_inter_token_latency_seconds_bucket",
                 "mxserve_num_requests_running", "mxserve_num_requests_waiting", "mxserve_kv_cache_usage_ratio"):
        assert name in text


def test_queue_full_is_503():
    small = start_live_server(api_key=None, max_pending_requests=1, max_model_len=256)
    try:
        with httpx.Client(base_url=small.base_url, timeout=60) as c:
            body = {"prompt": "In the beginning", "max_tokens": 200, "stream": True, "ignore_eos": True}
            with c.stream("POST", "/v1/completions", json=body) as stream:
                lines = stream.iter_lines()  # keep a reference: a collected iterator closes the stream
                next(line for line in lines if line.startswith("data: "))
                busy = c.post("/v1/completions", json={"prompt": "x", "max_tokens": 1})
                assert busy.status_code == 503
                assert busy.json()["error"]["type"] == "service_unavailable_error"
                batch = c.post("/v1/completions", json={"prompt": ["a", "b"], "max_tokens": 1})
                assert batch.status_code == 503
            wait_until_idle(small)
            assert c.post("/v1/completions", json={"prompt": "x", "max_tokens": 1}).status_code == 200
    finally:
        small.stop()


def test_serve_cli_graceful_shutdown(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MXSERVE_API_KEY": "cli-key"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "mxserve.cli.main", "serve", "--port", "0", "--device", "cpu", "--max-model-len", "256",
         "--served-model-name", "bible", "--shutdown-grace", "20"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        port = None
        deadline = time.monotonic() + 60
        log = []
        while port is None and time.monotonic() < deadline:
            line = proc.stdout.readline()
            log.append(line)
            match = re.search(r"Uvicorn running on http://127\.0\.0\.1:(\d+)", line)
            port = int(match.group(1)) if match else None
        assert port is not None, "".join(log)
        base = f"http://127.0.0.1:{port}"
        headers = {"Authorization": "Bearer cli-key"}
        assert httpx.get(base + "/v1/models", headers=headers).json()["data"][0]["id"] == "bible"
        assert httpx.get(base + "/v1/models").status_code == 401
        body = {"model": "bible", "prompt": "In the beginning", "max_tokens": 12, "stream": True, "ignore_eos": True}
        with httpx.stream("POST", base + "/v1/completions", json=body, headers=headers, timeout=60) as stream:
            lines = stream.iter_lines()
            next(line for line in lines if line.startswith("data: "))
            proc.send_signal(signal.SIGTERM)  # mid-stream: the stream must still finish
            rest = [line for line in lines if line.startswith("data: ")]
        assert rest[-1] == "data: [DONE]"
        assert '"finish_reason": "length"' in rest[-2]
        # uvicorn re-raises the signal after a clean shutdown, so the exit status is "killed by SIGTERM"
        assert proc.wait(timeout=60) in (0, -signal.SIGTERM)
        output = "".join(log) + proc.stdout.read()
        assert "shutting down" in output and "Traceback" not in output
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
