"""The caller's home timeline."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from services.api import store
from services.api.deps import ReadAfter, Token, read
from services.api.models import Page
from services.api.routes import AUTH, BAD_CURSOR_OR_TOKEN, INVALID, UNAVAILABLE, CursorParam, Limit
from services.api.routes.posts import decode_cursor, page

router = APIRouter(prefix="/v1", responses={**AUTH, **INVALID, **UNAVAILABLE})

KIND = "home"


@router.get("/timeline", response_model=Page, tags=["timeline"],
            responses=BAD_CURSOR_OR_TOKEN)
async def timeline(token: Token, request: Request, after: ReadAfter, limit: Limit = 20,
                   cursor: CursorParam = None) -> Response:
    """Posts of the accounts the caller follows and the caller's own, newest first, no duplicates."""
    before = decode_cursor(KIND, cursor)
    rows = await read(request, token, after, lambda db, me: store.home_timeline(db, me, before, limit + 1))
    return page(KIND, rows, limit)
