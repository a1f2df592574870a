"""A live server on 127.0.0.1 with an ephemeral port: uvicorn in a background thread of the test
process, serving the packaged default model through an `AsyncEngine` (so tests can also look at
the engine's block manager and the metrics registry directly) or, with `engine_process=True`, a
`ProcessEngine` (the engine loop in a child process)."""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass

import uvicorn

from mxserve.config.engine_config import EngineConfig
from mxserve.engine.engine_client import EngineClient
from mxserve.server.app import build_app, build_engine
from mxserve.server.metrics import ServerMetrics
from mxserve.server.state import ServerConfig

MODEL_NAME = "mxserve-default"
API_KEY = "test-key-0123456789"


@dataclass
class LiveServer:
    base_url: str  # http://127.0.0.1:PORT
    engine: EngineClient
    metrics: ServerMetrics
    server: uvicorn.Server
    thread: threading.Thread

    @property
    def api_url(self) -> str:
        return self.base_url + "/v1"

    def stop(self, timeout_s: float = 30.0) -> None:
        self.server.should_exit = True
        self.thread.join(timeout_s)


def start_live_server(*, api_key: str | None = API_KEY, max_model_len: int = 1024, max_pending_requests: int = 1024,
                      shutdown_grace_s: float = 5.0, engine_process: bool = False) -> LiveServer:
    metrics = ServerMetrics()
    engine_config = EngineConfig(device="cpu", max_model_len=max_model_len, max_num_seqs=64,
                                 kv_cache_memory=512 << 20)
    server_config = ServerConfig(served_model_names=(MODEL_NAME,), api_key=api_key,
                                 max_pending_requests=max_pending_requests, shutdown_grace_s=shutdown_grace_s,
                                 max_body_bytes=1 << 20, engine_process=engine_process)
    engine = build_engine(engine_config, server_config, metrics)
    app = build_app(engine, server_config, metrics)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))  # the kernel picks a free port: no race with other test runs
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=5, access_log=False))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="uvicorn-test", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the test server did not start")
        time.sleep(0.02)
    return LiveServer(f"http://127.0.0.1:{port}", engine, metrics, server, thread)
