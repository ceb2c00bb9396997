"""Pure ASGI middleware: request size limit (before any parsing), Prometheus metrics by route template, and the
header fields dependencies leave in the request state (RateLimit, WalFeed-Read-After)."""

from __future__ import annotations

import time

from fastapi import HTTPException
from prometheus_client import CollectorRegistry, Counter, Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from services.api.problems import problem_response
from services.api.ratelimit import Decision
from services.api.readafter import HEADER


class BodyLimit:
    """413 for bodies over `max_bytes`: at once from Content-Length, else while the body streams in."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_bytes):
            status = 413 if length.isdigit() else 400
            detail = (f"request bodies are limited to {self.max_bytes} bytes" if status == 413
                      else "Content-Length is not a number")
            await problem_response(status, detail)(scope, receive, send)
            return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise HTTPException(413, f"request bodies are limited to {self.max_bytes} bytes")
            return message

        await self.app(scope, limited, send)


class Metrics:
    """walfeed_api_requests_total and walfeed_api_request_seconds, labelled by route template, not raw path."""

    def __init__(self, app: ASGIApp, registry: CollectorRegistry) -> None:
        self.app = app
        self.requests = Counter("walfeed_api_requests", "HTTP requests handled",
                                ["method", "route", "status"], registry=registry)
        self.latency = Histogram("walfeed_api_request_seconds", "HTTP request latency", ["method", "route"],
                                 registry=registry,
                                 buckets=(.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def record_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, record_status)
        finally:
            route = _template(scope)
            self.requests.labels(scope["method"], route, str(status)).inc()
            self.latency.labels(scope["method"], route).observe(time.perf_counter() - started)


class StateHeaders:
    """Adds to the response the header fields a dependency left in request.state (scope["state"]), whatever
    its status: `RateLimit-Policy` and `RateLimit` of a request that deps.throttle counted (the 429 itself, or a
    201, 204, 404...), and `WalFeed-Read-After` of a write when a read replica is configured (deps.written)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def add_fields(message: Message) -> None:
            if message["type"] == "http.response.start":
                state = scope.get("state", {})
                fields: dict[str, str] = {}
                decision: Decision | None = state.get("rate_limit")
                if decision is not None:
                    fields.update(decision.headers)
                read_after: str | None = state.get("read_after")
                if read_after is not None:
                    fields[HEADER] = read_after
                message["headers"] = [*message.get("headers", []),
                                      *((k.lower().encode(), v.encode()) for k, v in fields.items())]
            await send(message)

        await self.app(scope, receive, add_fields)


def _template(scope: Scope) -> str:
    route = scope.get("route")
    path = getattr(route, "path", None)
    return path if isinstance(path, str) else "unmatched"
