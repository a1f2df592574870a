"""ASGI middleware: one class that counts statuses, checks the API key and caps the body size.

Written as raw ASGI (not `BaseHTTPMiddleware`) so streaming responses pass through untouched and
a client disconnect still reaches the route's stream (which aborts the engine request).

* **API key**: with a key configured, every path except `/health`, `/metrics`, the docs and the
  OpenAPI schema needs `Authorization: Bearer <key>`; the comparison is `hmac.compare_digest`
  (constant time, so the response time leaks nothing about how much of a guess was right).
* **Body size**: a `Content-Length` above the limit is refused before the body is read; a chunked
  body is counted as it arrives and refused once it passes the limit. Both answer 413.
* **Metrics**: the status of every response (the streamed ones at their start) goes to
  `ServerMetrics.observe_http`.
"""

from __future__ import annotations

import hmac
import json

from fastapi import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mxserve.server.errors import error_body
from mxserve.server.metrics import ServerMetrics

OPEN_PATHS = frozenset({"/health", "/metrics", "/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"})


class ServerMiddleware:
    def __init__(self, app: ASGIApp, *, metrics: ServerMetrics, api_key: str | None, max_body_bytes: int) -> None:
        self.app = app
        self.metrics = metrics
        self.expected_auth = None if api_key is None else f"Bearer {api_key}".encode()
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]

        async def counting_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.metrics.observe_http(path, message["status"])
            await send(message)

        if self.expected_auth is not None and path not in OPEN_PATHS and not self._authorized(scope):
            await _send_error(counting_send, 401, "invalid or missing API key (send 'Authorization: Bearer <key>')",
                              code="invalid_api_key", headers=[(b"www-authenticate", b"Bearer")])
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_body_bytes:
            await _send_error(counting_send, 413, f"request body of {declared} bytes exceeds the limit of "
                              f"{self.max_body_bytes} bytes")
            return

        received = 0

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_body_bytes:
                    # Raised inside the route's body read; FastAPI passes HTTPException through to
                    # the app's error handler, which renders the OpenAI error object.
                    raise HTTPException(413, f"request body exceeds the limit of {self.max_body_bytes} bytes")
            return message

        await self.app(scope, limited_receive, counting_send)

    def _authorized(self, scope: Scope) -> bool:
        assert self.expected_auth is not None
        supplied = b""
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                supplied = value
                break
        return hmac.compare_digest(supplied, self.expected_auth)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def _send_error(send: Send, status: int, message: str, *, code: str | None = None,
                      headers: list[tuple[bytes, bytes]] | None = None) -> None:
    body = json.dumps(error_body(status, message, code=code)).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            *(headers or [])]})
    await send({"type": "http.response.body", "body": body})
