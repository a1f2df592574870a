"""The routes: thin wrappers that parse a body, call the endpoint module, and return JSON.

`/tokenize` and `/detokenize` have vLLM's shapes (`{"count", "max_model_len", "tokens"}` and
`{"prompt"}`); a `prompt` is tokenized as `/v1/completions` would (BOS first unless
`add_special_tokens` is false), `messages` as `/v1/chat/completions` would.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from mxserve.server.chat import create_chat_completion, encode_chat_prompt, resolve_thinking
from mxserve.server.completions import create_completion
from mxserve.server.errors import bad_request, error_response
from mxserve.server.protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    DetokenizeRequest,
    TokenizeRequest,
)
from mxserve.server.state import ServerState

router = APIRouter()

# Shown in the OpenAPI schema so clients (and schemathesis) know the error shape.
_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"description": "Invalid request (OpenAI error object)"},
    401: {"description": "Missing or wrong API key"},
    404: {"description": "Unknown model"},
    413: {"description": "Body too large"},
    503: {"description": "Queue full or shutting down"},
}


def _state(request: Request) -> ServerState:
    return request.app.state.mxserve


@router.get("/health", responses={503: {"description": "The engine loop has stopped"}})
async def health(request: Request) -> Response:
    state = _state(request)
    if not state.engine.is_alive:
        return error_response(503, "the engine loop has stopped")
    return Response(status_code=200)


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    state = _state(request)
    return Response(state.metrics.render(state.engine.stats), media_type="text/plain; version=0.0.4")


@router.get("/v1/models", responses=_ERRORS)
async def list_models(request: Request) -> dict[str, Any]:
    state = _state(request)
    return {"object": "list", "data": [
        {"id": name, "object": "model", "created": state.created_s, "owned_by": "mxserve",
         "max_model_len": state.max_model_len} for name in state.config.served_model_names]}


@router.post("/v1/completions", responses=_ERRORS)
async def completions(body: CompletionRequest, request: Request) -> Any:
    result = await create_completion(_state(request), body, request)
    return result if result is not None else Response(status_code=499)


@router.post("/v1/chat/completions", responses=_ERRORS)
async def chat_completions(body: ChatCompletionRequest, request: Request) -> Any:
    result = await create_chat_completion(_state(request), body, request)
    return result if result is not None else Response(status_code=499)


@router.post("/tokenize", responses=_ERRORS)
async def tokenize(body: TokenizeRequest, request: Request) -> dict[str, Any]:
    state = _state(request)
    state.check_model(body.model)
    if (body.prompt is None) == (body.messages is None):
        raise bad_request("send exactly one of prompt and messages", param="prompt")
    if body.messages is not None:
        thinking, effort = resolve_thinking(body.reasoning_effort, body.chat_template_kwargs)
        ids = encode_chat_prompt(state, body.messages, thinking=thinking, effort=effort, tools=None)
    else:
        assert body.prompt is not None
        ids = state.tokenizer.encode(body.prompt)
        if body.add_special_tokens:
            ids = [state.engine.info.model_config.bos_token_id, *ids]
    return {"count": len(ids), "max_model_len": state.max_model_len, "tokens": ids}


@router.post("/detokenize", responses=_ERRORS)
async def detokenize(body: DetokenizeRequest, request: Request) -> JSONResponse:
    state = _state(request)
    state.check_model(body.model)
    vocab_size = state.engine.info.model_config.vocab_size
    bad = [t for t in body.tokens if t >= vocab_size]
    if bad:
        raise bad_request(f"token id {bad[0]} is outside the vocabulary [0, {vocab_size})", param="tokens")
    return JSONResponse({"prompt": state.tokenizer.decode(body.tokens)})
