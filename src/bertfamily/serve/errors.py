"""The server's error answers, one shape per wire: TEI's JSON ``{"error", "error_type"}``,
and OpenAI's ``{"error": {"message", "type", "param", "code"}}`` under ``/v1/``, for every
refusal, ours (`ServeError`) and FastAPI's (a body it cannot parse, a field of the wrong
type), and for a body too deep or not UTF-8: never a 500 for a bad request."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..errors import ServeError
from .http import error_body

__all__ = ["error_response", "install_error_handlers"]


def error_response(request: Request, status: int, message: str, error_type: str) -> JSONResponse:
    """The JSON error answer of ``request``'s route (`http.error_body`)."""
    return JSONResponse(error_body(request.url.path, status, message, error_type), status)


async def _serve_error(request: Request, e: ServeError) -> JSONResponse:
    return error_response(request, e.status, str(e), e.error_type)


async def _http_error(request: Request, e: StarletteHTTPException) -> JSONResponse:
    # FastAPI's own refusals (a body it cannot parse: deep nesting, bad bytes) in our shape
    status = 422 if e.status_code == 400 else e.status_code
    return error_response(request, status, f"invalid request: {e.detail}", "Validation")


async def _too_deep(request: Request, e: RecursionError) -> JSONResponse:
    return error_response(request, 400, "request body nests too deeply", "Validation")


async def _bad_text(request: Request, e: UnicodeError) -> JSONResponse:
    reason = getattr(e, "reason", str(e))
    return error_response(
        request, 400, f"request body is not valid UTF-8 text ({reason})", "Validation"
    )


async def _bad_body(request: Request, e: RequestValidationError) -> JSONResponse:
    parts = []
    for item in e.errors()[:3]:
        where = ".".join(str(x) for x in item.get("loc", ()) if x != "body")
        parts.append(f"{where or 'body'}: {item.get('msg', 'invalid')}")
    return error_response(request, 422, "invalid request: " + "; ".join(parts), "Validation")


def install_error_handlers(app: FastAPI) -> None:
    """Answer every refusal of ``app`` in the documented JSON shape."""
    app.add_exception_handler(ServeError, _serve_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(RecursionError, _too_deep)
    app.add_exception_handler(UnicodeError, _bad_text)
    app.add_exception_handler(RequestValidationError, _bad_body)
