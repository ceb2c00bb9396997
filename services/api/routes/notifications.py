"""The caller's in-app notifications and their read marker (docs/notifications.md)."""

from __future__ import annotations

from fastapi import APIRouter, Request

from services.api import cursor as cursors
from services.api import paging, store
from services.api.deps import Token, session, write_session
from services.api.models import MarkRead, NotificationPage, Unread, notification_from_row
from services.api.routes import AUTH, BAD_CURSOR, BODY, INVALID, LIMITED, UNAVAILABLE, CursorParam, Limit
from services.api.routes.posts import decode_cursor

router = APIRouter(prefix="/v1", responses={**AUTH, **INVALID, **UNAVAILABLE}, tags=["notifications"])

KIND = "notifications"


@router.get("/notifications", response_model=NotificationPage, responses=BAD_CURSOR)
async def list_notifications(token: Token, request: Request, limit: Limit = 20,
                             cursor: CursorParam = None) -> NotificationPage:
    """The caller's notifications, newest first (withdrawn mentions left out), and how many are unread."""
    before = decode_cursor(KIND, cursor)
    async with session(request, token) as (db, me):
        rows, unread = await store.notifications(db, me, before or cursors.MAX_ID, limit + 1)
    items, more = paging.cut(rows, limit)
    return NotificationPage(items=[notification_from_row(r) for r in items], unread_count=unread,
                            next_cursor=cursors.encode(KIND, items[-1]["id"]) if more else None)


@router.post("/notifications/read", response_model=Unread, responses={**BODY, **LIMITED})
async def mark_read(marker: MarkRead, token: Token, request: Request) -> Unread:
    """Every notification of the caller with an id up to `up_to` is read. The marker never moves back, and never
    past the caller's newest notification (one that arrives later is unread)."""
    async with write_session(request, token) as (db, me):
        return Unread(unread_count=await store.mark_read(db, me, marker.up_to))
