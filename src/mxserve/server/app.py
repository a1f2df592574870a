"""Building the FastAPI app around an engine front, and running it with uvicorn.

`build_engine` starts the engine as `ServerConfig.engine_process` says: a thread of this process
(`AsyncEngine`) or a process of its own (`ProcessEngine`). `build_app` takes an engine that is
already loaded (tests build one per session); the app's
lifespan shuts the engine down when uvicorn stops: uvicorn first stops accepting connections and
waits (up to its graceful-shutdown timeout) for open responses, cancelling streams still open
after it, which aborts their requests; then the engine's `shutdown` lets anything left finish for
`shutdown_grace_s` and aborts the rest (and stops the engine process, in that mode).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from mxserve.config.engine_config import EngineConfig
from mxserve.engine.async_engine import AsyncEngine
from mxserve.engine.engine_client import EngineClient
from mxserve.engine.engine_core import EngineSetup
from mxserve.engine.llm_engine import LLMEngine
from mxserve.engine.process_engine import ProcessEngine
from mxserve.server.errors import install_error_handlers
from mxserve.server.metrics import ServerMetrics
from mxserve.server.middleware import ServerMiddleware
from mxserve.server.routes import router
from mxserve.server.state import ServerConfig, ServerState

logger = logging.getLogger("mxserve.server")


def build_engine(engine_config: EngineConfig, server_config: ServerConfig, metrics: ServerMetrics,
                 *, progress: bool = False, engine_setup: EngineSetup | None = None) -> EngineClient:
    """The loaded engine behind its front; graphs captured first when the config asks.
    engine_setup: test/benchmark hook run on the loaded `LLMEngine` (in the engine process in that
    mode, so it must pickle). Raises EngineStartError when the engine process cannot start."""
    if server_config.engine_process:
        return ProcessEngine(engine_config, max_pending=server_config.max_pending_requests,
                             on_finished=metrics.observe_finished,
                             capture_graphs=server_config.capture_graphs_at_start, progress=progress,
                             engine_setup=engine_setup)
    engine = LLMEngine(engine_config, progress=progress)
    if engine_setup is not None:
        engine_setup(engine)
    if server_config.capture_graphs_at_start:
        engine.capture_graphs()
    return AsyncEngine(engine, max_pending=server_config.max_pending_requests, on_finished=metrics.observe_finished)


def build_app(engine: EngineClient, config: ServerConfig, metrics: ServerMetrics) -> FastAPI:
    """The app; `metrics` must be the one the engine reports finished requests to."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        logger.info("shutting down: in-flight requests get %.0f s to finish", config.shutdown_grace_s)
        await engine.shutdown(config.shutdown_grace_s)

    app = FastAPI(title="mxserve", summary="OpenAI-compatible API for DeepSeek-V4 checkpoints", version="0.1.0",
                  lifespan=lifespan)
    app.state.mxserve = ServerState(config, engine, metrics)
    app.include_router(router)
    install_error_handlers(app)
    metrics.known_paths.update(getattr(route, "path", "") for route in [*app.routes, *router.routes])
    app.add_middleware(ServerMiddleware, metrics=metrics, api_key=config.api_key, max_body_bytes=config.max_body_bytes)
    return app


def serve(engine_config: EngineConfig, server_config: ServerConfig, *, host: str, port: int,
          progress: bool = False, graceful_timeout_s: float = 30.0) -> None:
    """Load the engine and serve until SIGINT/SIGTERM."""
    import uvicorn

    metrics = ServerMetrics()
    engine = build_engine(engine_config, server_config, metrics, progress=progress)
    app = build_app(engine, server_config, metrics)
    logger.info("serving %s on http://%s:%d (max_model_len %d, engine loop in %s)",
                list(server_config.served_model_names), host, port, engine.info.max_model_len,
                "its own process" if server_config.engine_process else "a thread of the server process")
    uvicorn.run(app, host=host, port=port, log_level="info", timeout_graceful_shutdown=graceful_timeout_s,
                access_log=False)
