"""The api's one pure ASGI middleware: the request size limit (before any parsing), Prometheus metrics by route
template, and the header fields dependencies leave in the request state (RateLimit, WalFeed-Read-After).

One layer instead of three (ADR 0110): each layer of ASGI middleware is a coroutine call and a wrapped `send` per
message of every request, and these three wrapped the same calls.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Final

from fastapi import HTTPException
from prometheus_client import CollectorRegistry, Counter, Histogram
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from services.api.problems import problem_response
from services.api.ratelimit import Decision
from services.api.readafter import HEADER

_READ_AFTER: Final = HEADER.lower().encode()
MAX_SERIES: Final = 1000  # labelled children remembered (routes x methods x statuses are far fewer)


class Edge:
    """Per HTTP request: 413 for bodies over `max_bytes` (at once from Content-Length, else while the body streams
    in); walfeed_api_requests_total and walfeed_api_request_seconds labelled by route template, not raw path;
    `RateLimit-Policy` and `RateLimit` of a request that deps.throttle counted (the 429 itself, or a 201, 204,
    404...) and `WalFeed-Read-After` of a write when a read replica is configured (deps.written), whatever its
    status, from request.state (scope["state"])."""

    def __init__(self, app: ASGIApp, max_bytes: int, registry: CollectorRegistry,
                 error: Callable[[str, int, str], Response] | None = None) -> None:
        """`error(path, status, detail)`: the answer to a refused request (a problem document by default)."""
        self.app = app
        self.max_bytes = max_bytes
        self.error = error or (lambda _path, status, detail: problem_response(status, detail))
        self.requests = Counter("walfeed_api_requests", "HTTP requests handled",
                                ["method", "route", "status"], registry=registry)
        self.latency = Histogram("walfeed_api_request_seconds", "HTTP request latency", ["method", "route"],
                                 registry=registry,
                                 buckets=(.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5))
        # labels() takes a lock and builds its key on every call: the children are looked up here instead
        self._series: dict[tuple[str, str, int], tuple[Any, Any]] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def respond(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                fields = _state_fields(scope.get("state"))
                if fields:
                    message["headers"] = [*message.get("headers", []), *fields]
            await send(message)

        try:
            if (refusal := self._refusal(scope)) is not None:
                await refusal(scope, receive, respond)
            else:
                await self.app(scope, self._limited(receive), respond)
        finally:
            self._observe(scope, status, time.perf_counter() - started)

    def _refusal(self, scope: Scope) -> ASGIApp | None:
        """The 413 (or 400) of a Content-Length over the limit (or not a number), before the app sees the request."""
        for name, length in scope["headers"]:
            if name == b"content-length":
                if length.isdigit() and int(length) <= self.max_bytes:
                    return None
                if length.isdigit():
                    return self.error(scope["path"], 413, f"request bodies are limited to {self.max_bytes} bytes")
                return self.error(scope["path"], 400, "Content-Length is not a number")
        return None

    def _limited(self, receive: Receive) -> Receive:
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise HTTPException(413, f"request bodies are limited to {self.max_bytes} bytes")
            return message

        return limited

    def _observe(self, scope: Scope, status: int, seconds: float) -> None:
        route = _template(scope)
        key = (scope["method"], route, status)
        series = self._series.get(key)
        if series is None:
            series = (self.requests.labels(key[0], route, str(status)), self.latency.labels(key[0], route))
            if len(self._series) < MAX_SERIES:
                self._series[key] = series
        series[0].inc()
        series[1].observe(seconds)


def _state_fields(state: dict[str, Any] | None) -> list[tuple[bytes, bytes]]:
    """The header fields a dependency left in the request state, as ASGI headers."""
    if not state:
        return []
    fields: list[tuple[bytes, bytes]] = []
    decision: Decision | None = state.get("rate_limit")
    if decision is not None:
        fields += [(k.lower().encode(), v.encode()) for k, v in decision.headers.items()]
    read_after: str | None = state.get("read_after")
    if read_after is not None:
        fields.append((_READ_AFTER, read_after.encode()))
    return fields


def _template(scope: Scope) -> str:
    route = scope.get("route")
    path = getattr(route, "path", None)
    return path if isinstance(path, str) else "unmatched"
