"""The caller's notifications as Mastodon's: `follow` and `mention` (the kinds walfeed's notifier writes,
docs/notifications.md), filtered by `types[]` / `exclude_types[]`, paged as the home timeline."""

from __future__ import annotations

from typing import Any, Final

from fastapi import APIRouter, Request, Response

from services.api.mastodon import pages, store, views
from services.api.mastodon.auth import read
from services.api.mastodon.errors import not_found
from services.api.mastodon.params import gather, record_id
from services.api.store import Conn

router = APIRouter(include_in_schema=False)
KINDS: Final = ("follow", "mention")


def kinds(types: list[str], excluded: list[str]) -> list[str]:
    """The kinds asked for: `types[]` (all when empty) without `exclude_types[]`; unknown names match nothing."""
    wanted = [k for k in KINDS if k in types] if types else list(KINDS)
    return [k for k in wanted if k not in excluded]


@router.get("/api/v1/notifications")
async def list_notifications(request: Request) -> Response:
    params = await gather(request)
    limit = params.limit(pages.DEFAULT_LIMIT, 80)  # Mastodon: 40 by default, 80 at most; here 20 as elsewhere
    asked = pages.page_range(params, limit)
    chosen = kinds(params.strings("types"), params.strings("exclude_types"))

    async def page(db: Conn, me: int) -> tuple[list[dict[str, Any]], bool]:
        rows = await store.notifications(db, me, chosen, asked) if chosen else []
        items, more = pages.cut(asked, rows, limit)
        return await views.notifications(request, db, items), more

    items, more = await read(request, "read:notifications", page)
    return views.listing(request, params, asked, items, more)


@router.get("/api/v1/notifications/{notification_id}")
async def get_notification(notification_id: str, request: Request) -> Response:
    wanted = record_id(notification_id)

    async def one(db: Conn, me: int) -> list[dict[str, Any]]:
        row = await store.notification(db, me, wanted)
        return [] if row is None else await views.notifications(request, db, [row])

    found = await read(request, "read:notifications", one)
    if not found:
        raise not_found()
    return views.json(found[0])
