"""The caller's home timeline, paged towards older and towards newer posts (docs/adr/0096)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from services.api import cursor as cursors
from services.api import paging, store
from services.api.deps import ReadAfter, Token, read
from services.api.fastroute import FastRoute
from services.api.models import HomePage, page_json
from services.api.problems import ApiError
from services.api.routes import AUTH, BAD_CURSOR_OR_TOKEN, INVALID, UNAVAILABLE, CursorParam, Limit
from services.api.routes.posts import json_response

router = APIRouter(prefix="/v1", responses={**AUTH, **INVALID, **UNAVAILABLE}, route_class=FastRoute)

KIND = "home"


def page_range(value: str | None, limit: int) -> paging.Range:
    """The range a cursor asks for (400 invalid-cursor when it is not one this listing issued)."""
    if value is None:
        return paging.Range(fetch=limit + 1)
    try:
        position = cursors.decode_position(KIND, value)
    except cursors.InvalidCursor as exc:
        raise ApiError(400, f"{exc}: pass a next_cursor or prev_cursor of a previous page unchanged",
                       "invalid-cursor") from None
    if position.newer:
        return paging.Range(after=position.id, order="oldest", fetch=limit + 1)
    return paging.Range(before=position.id, fetch=limit + 1)


def home_page(asked: paging.Range, rows: list[store.Row], limit: int) -> Response:
    """Newest first whichever way it was read; the cursors point past either end. The HomePage as bytes built from
    the rows (response_model documents it; nothing validates the database's rows again: docs/adr/0110)."""
    items, more = paging.cut(rows, limit)
    if asked.order == "oldest":
        items.reverse()
    older = (more or asked.order == "oldest") and bool(items)
    if items:
        newer: str | None = cursors.encode(KIND, items[0]["id"], newer=True)
    else:  # nothing newer yet: the same position again, later
        newer = cursors.encode(KIND, asked.after, newer=True) if asked.order == "oldest" else None
    return json_response(page_json(items, cursors.encode(KIND, items[-1]["id"]) if older else None,
                                   prev_cursor=newer))


@router.get("/timeline", response_model=HomePage, tags=["timeline"],
            responses=BAD_CURSOR_OR_TOKEN)
async def timeline(token: Token, request: Request, after: ReadAfter = None, limit: Limit = 20,
                   cursor: CursorParam = None) -> Response:
    """Posts of the accounts the caller follows and the caller's own, newest first, no duplicates. `cursor`: a
    next_cursor (older posts) or prev_cursor (newer posts) of a previous page."""
    asked = page_range(cursor, limit)
    partitions = request.app.state.timeline_partitions
    rows = await read(request, token, after, lambda db, me: store.home_timeline(db, me, asked, partitions))
    return home_page(asked, rows, limit)
