"""Errors the OpenAI way: `{"error": {"message", "type", "param", "code"}}` with a fitting status.

Every failure path of the app ends here: `APIError` raised by handlers, pydantic validation
errors (400, naming the field), starlette's HTTP errors (404 route, 405 method, body parse
failures) and, as a last resort, any other exception (500, logged; the server keeps running).
"""

from __future__ import annotations

import logging
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

logger = logging.getLogger("mxserve.server")

# status → OpenAI's error `type`
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    503: "service_unavailable_error",
}


class APIError(Exception):
    """Raised by handlers; rendered as an OpenAI error object."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code


def bad_request(message: str, *, param: str | None = None) -> APIError:
    return APIError(400, message, param=param, code="invalid_value" if param else None)


def error_body(status: int, message: str, *, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    error_type = _ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": error_type, "param": param, "code": code}}


def error_response(status: int, message: str, *, param: str | None = None, code: str | None = None,
                   headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(error_body(status, message, param=param, code=code), status_code=status, headers=headers)


def _validation_message(exc: RequestValidationError) -> tuple[str, str | None]:
    """One readable line: the first problem's field and message. A value that fits none of a
    union's types yields one pydantic error per member; those are summed up as one."""
    errors = exc.errors()
    if not errors:
        return "invalid request", None
    first = errors[0]
    if first.get("type") == "json_invalid":
        return f"the body is not valid JSON: {first.get('ctx', {}).get('error', first.get('msg'))}", None
    location = [part for part in first.get("loc", ()) if part != "body"]
    field = str(location[0]) if location else None
    message = str(first.get("msg", "invalid value"))
    same_field = [e for e in errors if [p for p in e.get("loc", ()) if p != "body"][:1] == location[:1]]
    if field is not None and len(same_field) > 1:
        return f"{field}: invalid value (none of its accepted types fits; first problem: {message})", field
    param = ".".join(str(p) for p in location) or None
    more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
    return (f"{param}: {message}" if param else message) + more, field


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def _api_error(_: Request, exc: APIError) -> JSONResponse:
        return error_response(exc.status, exc.message, param=exc.param, code=exc.code)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        # OpenAI and vLLM answer 400 (not FastAPI's 422) for a body that does not fit the schema.
        message, param = _validation_message(exc)
        return error_response(400, message, param=param, code="invalid_value" if param else None)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        # FastAPI raises 400 "There was an error parsing the body" for undecodable bodies.
        status = exc.status_code
        message = exc.detail if isinstance(exc.detail, str) else HTTPStatus(status).phrase
        return error_response(status, message, headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        logger.exception("unhandled error")
        return error_response(500, f"internal error: {type(exc).__name__}")
