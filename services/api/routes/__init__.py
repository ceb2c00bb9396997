"""HTTP routes, one module per resource. Each handler: validate, call one store function, shape the reply."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Path, Query

from services.api.cursor import MAX_CURSOR_CHARS
from services.api.models import BIGINT_MAX

# Documented error responses (rendered as application/problem+json by app.openapi()).
AUTH: dict[int | str, dict[str, Any]] = {401: {"description": "missing or invalid bearer token"}}
NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"description": "no such resource"}}
INVALID: dict[int | str, dict[str, Any]] = {422: {"description": "the request does not match the schema"}}
BODY: dict[int | str, dict[str, Any]] = {
    400: {"description": "malformed JSON"},
    413: {"description": "request body over the size limit"},
}
UNAVAILABLE: dict[int | str, dict[str, Any]] = {503: {"description": "database unavailable"}}
LIMITED: dict[int | str, dict[str, Any]] = {429: {"description": "rate limit exceeded: see Retry-After and RateLimit"}}

Id = Annotated[int, Path(ge=1, le=BIGINT_MAX, description="an id (positive bigint)")]
Limit = Annotated[int, Query(ge=1, le=100, description="page size")]
CursorParam = Annotated[str | None, Query(max_length=MAX_CURSOR_CHARS, description="next_cursor of the previous page")]
