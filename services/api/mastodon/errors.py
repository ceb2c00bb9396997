"""Mastodon's error shape, `{"error": "..."}` with the status, for every answer under the Mastodon paths: the
layer's own errors (MastodonError), the api's shared ones (ApiError from the database or rate-limit plumbing,
problem documents of the framework's 404/405/413), all rewritten by one small ASGI middleware that only looks at
responses of the Mastodon paths."""

from __future__ import annotations

from typing import Final

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from services.api.problems import MEDIA_TYPE

PREFIXES: Final = ("/api/v1/", "/api/v2/", "/oauth/")
_PROBLEM: Final = MEDIA_TYPE.encode()
MAX_PROBLEM_BYTES: Final = 65_536  # a problem document is small; anything larger passes through as it is


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
    app.add_exception_handler(MastodonError, _handle)
    app.add_middleware(MastodonErrors)


def mastodon_path(path: str) -> bool:
    return path.startswith(PREFIXES) or path in ("/api/v1/instance", "/oauth/token")


class MastodonErrors:
    """Problem documents answered under a Mastodon path become `{"error": detail}`, same status and headers
    (but the content type and length). Other paths pass straight through."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not mastodon_path(scope["path"]):
            await self.app(scope, receive, send)
            return
        held: Message | None = None
        chunks: list[bytes] = []

        async def rewrite(message: Message) -> None:
            nonlocal held
            if message["type"] == "http.response.start" and _is_problem(message):
                held = message
                return
            if held is None or message["type"] != "http.response.body":
                await send(message)
                return
            chunks.append(message.get("body", b""))
            if message.get("more_body", False) and sum(map(len, chunks)) <= MAX_PROBLEM_BYTES:
                return
            body = _as_error(b"".join(chunks))
            headers = [(k, v) for k, v in held.get("headers", [])
                       if k.lower() not in (b"content-type", b"content-length")]
            headers += [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
            await send({**held, "headers": headers})
            await send({"type": "http.response.body", "body": body})

        await self.app(scope, receive, rewrite)


def _is_problem(start: Message) -> bool:
    return any(k.lower() == b"content-type" and v.startswith(_PROBLEM) for k, v in start.get("headers", []))


def _as_error(problem: bytes) -> bytes:
    try:
        doc = orjson.loads(problem)
    except orjson.JSONDecodeError:
        return error_json("error")
    detail = doc.get("detail") if isinstance(doc, dict) else None
    return error_json(detail if isinstance(detail, str) and detail else "error")
