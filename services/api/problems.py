"""RFC 9457 problem documents for every error the API returns, including the framework's own (404, 405, 422)."""

from __future__ import annotations

import logging
import re
from typing import Any, Final

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

from services.core import tracecontext

log = logging.getLogger(__name__)

MEDIA_TYPE: Final = "application/problem+json"
TYPE_BASE: Final = "https://walfeed.dev/problems/"

TITLES: Final[dict[int, str]] = {
    400: "Bad request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not found",
    405: "Method not allowed",
    409: "Conflict",
    413: "Content too large",
    415: "Unsupported media type",
    422: "Unprocessable content",
    429: "Too many requests",
    500: "Internal server error",
    503: "Service unavailable",
}


class Problem(BaseModel):
    type: str
    title: str
    status: int
    detail: str
    errors: list[dict[str, Any]] | None = None


class ApiError(Exception):
    """Raised by routes; rendered as a problem document."""

    def __init__(self, status: int, detail: str, slug: str | None = None, headers: dict[str, str] | None = None):
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.slug = slug or TITLES.get(status, "error").lower().replace(" ", "-")
        self.headers = headers or {}


def problem_response(status: int, detail: str, slug: str | None = None, *,
                     headers: dict[str, str] | None = None, errors: list[dict[str, Any]] | None = None) -> Response:
    title = TITLES.get(status, "Error")
    doc: dict[str, Any] = {
        "type": TYPE_BASE + (slug or title.lower().replace(" ", "-")),
        "title": title,
        "status": status,
        "detail": detail,
    }
    if errors is not None:
        doc["errors"] = errors
    return Response(orjson.dumps(doc), status_code=status, media_type=MEDIA_TYPE, headers=headers)


def unauthorized(detail: str) -> ApiError:
    return ApiError(401, detail, "unauthorized", {"WWW-Authenticate": 'Bearer realm="walfeed"'})


def _clean_errors(exc: RequestValidationError) -> list[dict[str, Any]]:
    """Validation errors without the offending input (it may be huge or not JSON-serializable)."""
    return [{"loc": [str(part) for part in err.get("loc", ())], "msg": str(err.get("msg", "")),
             "type": str(err.get("type", ""))} for err in exc.errors()]


async def _api_error(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return problem_response(exc.status, exc.detail, exc.slug, headers=exc.headers)


def allowed_methods(request: Request, fallback: str) -> str:
    """Every method the app's OpenAPI document serves at this path, for a 405's Allow (RFC 9110). Starlette names
    only the methods of the first route whose path matched, and PUT and DELETE of one resource are two routes."""
    table: list[tuple[re.Pattern[str], set[str]]] | None = getattr(request.app.state, "allow_table", None)
    if table is None:
        table = request.app.state.allow_table = [
            (_path_pattern(path), {method.upper() for method in operations})
            for path, operations in request.app.openapi()["paths"].items()]
    methods = set().union(*(allowed for pattern, allowed in table if pattern.fullmatch(request.url.path)))
    if not methods:
        return fallback  # a route outside the document (/docs...)
    return ", ".join(sorted(methods | ({"HEAD"} if "GET" in methods else set())))


def _path_pattern(template: str) -> re.Pattern[str]:
    return re.compile("".join("[^/]+" if part.startswith("{") else re.escape(part)
                              for part in re.split(r"(\{[^}]+\})", template)))


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    detail = exc.detail if isinstance(exc.detail, str) else TITLES.get(exc.status_code, "Error")
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        headers["Allow"] = allowed_methods(request, headers.get("Allow", ""))
    if exc.status_code == 400 and isinstance(exc.__cause__, UnicodeDecodeError):  # FastAPI's "error parsing the body"
        return problem_response(400, "the request body is not valid JSON: it is not UTF-8", "malformed-json")
    return problem_response(exc.status_code, detail, headers=headers)


async def _validation_error(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    errors = _clean_errors(exc)
    if any(err["type"] == "json_invalid" for err in errors):
        return problem_response(400, "the request body is not valid JSON", "malformed-json", errors=errors)
    return problem_response(422, "the request does not match the API's schema: see errors", "validation",
                            errors=errors)


async def _unexpected(request: Request, exc: Exception) -> Response:
    """A 500, logged with the request's trace id: its server span's when tracing (the span is no longer current
    here: Starlette runs this handler outside every middleware), else the caller's `traceparent`'s."""
    caller = tracecontext.parse(request.headers.get(tracecontext.HEADER))
    trace_id = getattr(request.state, "trace_id", None) or (caller.trace_id if caller else None)
    log.exception("unhandled error", extra={"path": request.url.path, "trace_id": trace_id})
    return problem_response(500, "the server failed to handle this request; it was logged", "internal")


def install(app: FastAPI) -> None:
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(Exception, _unexpected)
