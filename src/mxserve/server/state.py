"""What the routes share: the server's frozen config and the live state built from it."""

from __future__ import annotations

import itertools
import time
import uuid
from dataclasses import dataclass, field

from mxserve.engine.engine_client import EngineClient
from mxserve.engine.tokenizer import Tokenizer
from mxserve.server.errors import APIError
from mxserve.server.metrics import ServerMetrics

DEFAULT_MAX_BODY_BYTES = 8 << 20  # 8 MiB: a full 128K-token prompt as JSON token ids fits in ~1 MiB


@dataclass(frozen=True)
class ServerConfig:
    served_model_names: tuple[str, ...]  # names clients may send as `model`; the first one is reported
    api_key: str | None = None  # None = no authentication
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES  # larger bodies get 413
    max_pending_requests: int = 1024  # engine requests (one per prompt) in flight before 503
    shutdown_grace_s: float = 10.0  # in-flight requests get this long to finish on shutdown
    # capture every CUDA-graph bucket before the first request (LLMEngine.capture_graphs); False:
    # each on first use, a stall of every running request the first time a batch size appears
    capture_graphs_at_start: bool = True
    # the engine loop in its own process (ProcessEngine) instead of a thread of the server process
    # (AsyncEngine): the HTTP side and the engine then stop sharing one GIL (docs/server.md)
    engine_process: bool = False

    def __post_init__(self) -> None:
        if not self.served_model_names or not all(isinstance(n, str) and n for n in self.served_model_names):
            raise ValueError(f"ServerConfig.served_model_names={self.served_model_names!r}: need non-empty names")
        if self.api_key is not None and not self.api_key:
            raise ValueError("ServerConfig.api_key: an empty key would let nobody in; pass None for no key")
        for name in ("max_body_bytes", "max_pending_requests"):
            if getattr(self, name) <= 0:
                raise ValueError(f"ServerConfig.{name}={getattr(self, name)!r}: must be positive")


@dataclass
class ServerState:
    config: ServerConfig
    engine: EngineClient  # AsyncEngine or ProcessEngine
    metrics: ServerMetrics
    created_s: int = field(default_factory=lambda: int(time.time()))  # the `created` of /v1/models
    _ids: itertools.count = field(default_factory=itertools.count)

    @property
    def model_name(self) -> str:
        return self.config.served_model_names[0]

    @property
    def max_model_len(self) -> int:
        return self.engine.info.max_model_len

    @property
    def tokenizer(self) -> Tokenizer:
        tokenizer = self.engine.info.tokenizer
        if tokenizer is None:
            raise APIError(400, "this checkpoint ships no tokenizer.json: text prompts, chat and (de)tokenize "
                                "need one; send completion prompts as token ids")
        return tokenizer

    def check_model(self, requested: str | None) -> str:
        """The model name to report; 404 for a name this server does not serve."""
        if requested is None or requested in self.config.served_model_names:
            return self.model_name
        raise APIError(404, f"the model {requested!r} does not exist; this server serves "
                            f"{list(self.config.served_model_names)}", param="model", code="model_not_found")

    def new_request_id(self, prefix: str) -> str:
        # A counter keeps ids unique within the process; the random part keeps them unique across restarts.
        return f"{prefix}-{uuid.uuid4().hex[:16]}{next(self._ids)}"
