"""HTTP routes, one module per resource. Each handler: validate, call one store function, shape the reply."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Annotated, Any

from fastapi import Path, Query, Request

from services.api.cursor import MAX_CURSOR_CHARS
from services.api.models import BIGINT_MAX
from services.core.tracecontext import HEADER as TRACEPARENT

# Documented error responses (rendered as application/problem+json by app.openapi()); docs/api.md lists them.
_STRING: dict[str, Any] = {"schema": {"type": "string"}}
RETRY_AFTER: dict[str, Any] = {"Retry-After": {**_STRING, "description": "seconds to wait before retrying"}}
AUTH: dict[int | str, dict[str, Any]] = {401: {"description": "missing or invalid bearer token"}}
NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"description": "no such resource"}}
INVALID: dict[int | str, dict[str, Any]] = {422: {"description": "the request does not match the schema"}}
BODY: dict[int | str, dict[str, Any]] = {
    400: {"description": "malformed JSON"},
    413: {"description": "request body over the size limit"},
}
BAD_TOKEN: dict[int | str, dict[str, Any]] = {
    400: {"description": "WalFeed-Read-After is not a position a write returned (invalid-read-after)"}}
BAD_CURSOR: dict[int | str, dict[str, Any]] = {
    400: {"description": "the cursor is not a next_cursor of this listing (invalid-cursor)"}}
BAD_CURSOR_OR_TOKEN: dict[int | str, dict[str, Any]] = {
    400: {"description": "the cursor is not a next_cursor of this listing (invalid-cursor), or WalFeed-Read-After "
                         "is not a position a write returned (invalid-read-after)"}}
UNAVAILABLE: dict[int | str, dict[str, Any]] = {503: {
    "description": "the database is unavailable (database-unavailable) or took longer than the api allows "
                   "(database-timeout)", "headers": RETRY_AFTER}}
LIMITED: dict[int | str, dict[str, Any]] = {429: {
    "description": "rate limit exceeded (rate-limited): see Retry-After and RateLimit", "headers": RETRY_AFTER}}


def invalid(also: str) -> dict[int | str, dict[str, Any]]:
    """The 422 of an operation that also answers it for a reason of its own."""
    return {422: {"description": f"the request does not match the schema, or {also}"}}


Id = Annotated[int, Path(ge=1, le=BIGINT_MAX, description="an id (positive bigint)")]
Limit = Annotated[int, Query(ge=1, le=100, description="page size")]
CursorParam = Annotated[str | None, Query(max_length=MAX_CURSOR_CHARS, description="next_cursor of the previous page")]


def outbox_trace(request: Request) -> AbstractContextManager[str]:
    """Around a write: the trace context its outbox row stores (the `tracingspancontext` column's text) from the
    request's `traceparent` header, in a `create` span when tracing (services/core/tracing.py, docs/adr/0072)."""
    state = request.app.state
    return state.tracing.create(state.events_exchange, request.headers.get(TRACEPARENT))  # type: ignore[no-any-return]
