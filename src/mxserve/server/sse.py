"""Server-sent events as OpenAI streams them: `data: <json>\\n\\n` per chunk, then `data: [DONE]`."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi.responses import StreamingResponse

DONE = b"data: [DONE]\n\n"


def event(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload, ensure_ascii=False, allow_nan=False).encode() + b"\n\n"


def sse_response(chunks: AsyncIterator[bytes]) -> StreamingResponse:
    # no-cache and no proxy buffering: each chunk should reach the client when it is produced.
    return StreamingResponse(chunks, media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
