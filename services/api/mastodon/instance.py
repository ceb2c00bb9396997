"""The instance (v1, with and without the trailing slash Mastodon.py adds: without it, Mastodon.py's version
check recurses, halcy/Mastodon.py#450). `/api/v2/instance` is not served (a 404), which clients fall back from."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from services.api.mastodon import entities, store, views
from services.api.mastodon.auth import anonymous

router = APIRouter(include_in_schema=False)


@router.get("/api/v1/instance")
@router.get("/api/v1/instance/")
async def instance(request: Request) -> Response:
    async with anonymous(request) as db:
        counts = await store.counts(db)
    return views.json(entities.instance(views.site(request), views.streaming_url(request), int(counts["users"]),
                                        int(counts["statuses"])))
