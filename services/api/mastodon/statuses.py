"""Statuses (post, read, delete) and the home timeline: the api's own writes and reads (services/api/store.py),
so a status posted here is fanned out, notifies and reaches webhooks like any post, and the home timeline is the
same merged one /v1/timeline reads (celebrities' posts included, docs/adr/0096)."""

from __future__ import annotations

import hmac
import re
from typing import Any, Final

from fastapi import APIRouter, Request, Response
from pydantic import ValidationError

from services.api import store as api_store
from services.api.deps import admit, written
from services.api.mastodon import entities, pages, views
from services.api.mastodon.auth import read, session, write_session
from services.api.mastodon.errors import MastodonError, not_found
from services.api.mastodon.params import gather, record_id
from services.api.models import NewPost
from services.api.routes import outbox_trace
from services.api.routes.posts import request_hash
from services.api.store import Conn, Row

router = APIRouter(include_in_schema=False)
_KEY: Final = re.compile(r"^[!-~]{1,255}$")  # as POST /v1/posts' Idempotency-Key


def _new_post(text: str | None) -> NewPost:
    if text is None or not text.strip():
        raise MastodonError(422, "Validation failed: Text can't be blank")
    try:
        return NewPost(body=text)
    except ValidationError as exc:
        reason = exc.errors()[0].get("msg", "invalid text") if exc.errors() else "invalid text"
        raise MastodonError(422, f"Validation failed: Text {str(reason).removeprefix('Value error, ')}") from None


@router.post("/api/v1/statuses")
async def create_status(request: Request) -> Response:
    """`status` (the text, 1..500 characters) is posted; visibility, language, sensitive...: accepted and ignored
    (every walfeed post is public). media, polls, replies and scheduling are refused: walfeed has none."""
    params = await gather(request)
    for unsupported in ("media_ids", "poll", "in_reply_to_id", "scheduled_at"):
        value = params.values.get(unsupported, params.values.get(f"{unsupported}[]"))
        if value not in (None, "", []):
            raise MastodonError(422, f"Validation failed: {unsupported} is not supported by this server")
    new = _new_post(params.text("status", 20_000))
    key = request.headers.get("idempotency-key")
    if key is not None and not _KEY.fullmatch(key):
        raise MastodonError(422, "Validation failed: Idempotency-Key is 1 to 255 printable ASCII characters")
    digest = request_hash(new) if key is not None else None
    quota = request.app.state.api_settings.write_limit
    with outbox_trace(request) as trace:
        async with session(request, "write:statuses") as (db, me):
            if quota.enabled:  # counted and written in one statement, as POST /v1/posts
                hit, post, created = await api_store.create_counted_post(
                    db, quota.key(str(me)), quota.window, quota.limit, me, new.body, key, digest, trace)
                admit(request, quota, hit)
                assert post is not None
                row = post
            else:
                row, created = await api_store.create_post(db, me, new.body, key, digest, trace)
            if not created and (digest is None or not hmac.compare_digest(bytes(row["request_hash"] or b""),
                                                                          digest)):
                raise MastodonError(422, "Validation failed: this Idempotency-Key was used with another status")
            await written(request, db, me)
            status = (await views.statuses(request, db, [row]))[0]
    return views.json(status)


@router.get("/api/v1/statuses/{status_id}")
async def get_status(status_id: str, request: Request) -> Response:
    post_id = record_id(status_id)

    async def one(db: Conn, _: int) -> list[dict[str, Any]]:
        row = await api_store.get_post(db, post_id)
        return [] if row is None else await views.statuses(request, db, [row])

    found = await read(request, "read:statuses", one)
    if not found:
        raise not_found()
    return views.json(found[0])


@router.delete("/api/v1/statuses/{status_id}")
async def delete_status(status_id: str, request: Request) -> Response:
    """200 with the deleted Status and its `text` (Mastodon's "delete and redraft"); someone else's or an unknown
    status is a 404."""
    post_id = record_id(status_id)
    with outbox_trace(request) as trace:
        async with write_session(request, "write:statuses") as (db, me):
            row = await api_store.get_post(db, post_id)
            if row is None or int(row["author_id"]) != me \
                    or await api_store.delete_post(db, post_id, me, trace) is None:
                raise not_found()
            author = (await views.accounts(request, db, [me]))[me]
    return views.json(entities.status(row, author, views.site(request), text=True))


@router.get("/api/v1/timelines/home")
async def home(request: Request) -> Response:
    params = await gather(request)
    limit = params.limit(pages.DEFAULT_LIMIT, pages.MAX_LIMIT)
    asked = pages.page_range(params, limit)

    async def page(db: Conn, me: int) -> tuple[list[int], list[bytes], bool]:
        rows: list[Row] = await api_store.home_timeline(db, me, asked, request.app.state.timeline_partitions)
        items, more = pages.cut(asked, rows, limit)
        return [int(r["id"]) for r in items], await views.status_json(request, db, items), more

    ids, parts, more = await read(request, "read:statuses", page)
    return views.status_listing(request, params, asked, ids, parts, more)
