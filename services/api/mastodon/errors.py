"""Mastodon's error shape, `{"error": "..."}` with the status, for every answer under the Mastodon paths: the
layer's own errors (MastodonError), the api's shared ones (ApiError from the database or rate-limit plumbing,
problem documents of the framework's 404/405/413): the app's exception handlers, wrapped to answer that shape under
the Mastodon paths, and the edge middleware's refusal of a body over the limit (edge_error)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import Response

from services.api.problems import MEDIA_TYPE, problem_response

PREFIXES: Final = ("/api/v1/", "/api/v2/", "/oauth/")


class MastodonError(Exception):
    """Raised by the Mastodon routes; answered as `{"error": message}` (plus `error_description` for OAuth)."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None,
                 description: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}
        self.description = description


def not_found() -> MastodonError:
    return MastodonError(404, "Record not found")


def unauthorized(message: str = "The access token is invalid") -> MastodonError:
    return MastodonError(401, message, {"WWW-Authenticate": 'Bearer realm="walfeed", error="invalid_token"'})


def error_json(message: str, description: str | None = None) -> bytes:
    body: dict[str, str] = {"error": message}
    if description is not None:
        body["error_description"] = description
    return orjson.dumps(body)


def error_response(status: int, message: str, headers: dict[str, str] | None = None,
                   description: str | None = None) -> Response:
    return Response(error_json(message, description), status_code=status, media_type="application/json",
                    headers=headers)


async def _handle(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, MastodonError)
    return error_response(exc.status, exc.message, exc.headers, exc.description)


def install(app: FastAPI) -> None:
    """The layer's own errors, and every exception handler the app has already (services/api/problems.py) made to
    answer Mastodon's shape under the Mastodon paths: no middleware layer, nothing on the other paths' way."""
    for kind, handler in list(app.exception_handlers.items()):
        app.exception_handlers[kind] = _shaped(handler)
    app.add_exception_handler(MastodonError, _handle)


def mastodon_path(path: str) -> bool:
    return path.startswith(PREFIXES)


Handler = Callable[[Request, Exception], Awaitable[Response]]


def _shaped(handler: Any) -> Handler:
    async def shaped(request: Request, exc: Exception) -> Response:
        response: Response = await handler(request, exc)
        return reshaped(response) if mastodon_path(request.url.path) else response

    return shaped


def reshaped(response: Response) -> Response:
    """A problem document as `{"error": detail}`, same status and headers (but its type and length)."""
    if response.media_type != MEDIA_TYPE:
        return response
    headers = {k: v for k, v in response.headers.items() if k.lower() not in ("content-type", "content-length")}
    return Response(_as_error(bytes(response.body)), status_code=response.status_code,
                    media_type="application/json", headers=headers)


def edge_error(path: str, status: int, detail: str) -> Response:
    """The answer of the api's edge middleware (a body over the size limit) before any route runs."""
    response = problem_response(status, detail)
    return reshaped(response) if mastodon_path(path) else response


def _as_error(problem: bytes) -> bytes:
    try:
        doc = orjson.loads(problem)
    except orjson.JSONDecodeError:
        return error_json("error")
    detail = doc.get("detail") if isinstance(doc, dict) else None
    return error_json(detail if isinstance(detail, str) and detail else "error")
