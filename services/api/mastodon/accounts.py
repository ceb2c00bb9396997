"""Accounts: the caller's, by id, by handle (lookup, v2 search), following, and an account's statuses."""

from __future__ import annotations

import re

from fastapi import APIRouter, Request, Response

from services.api import store as api_store
from services.api.mastodon import entities, pages, store, views
from services.api.mastodon.auth import read, write_session
from services.api.mastodon.errors import MastodonError, not_found
from services.api.mastodon.params import gather, record_id
from services.api.models import HANDLE_PATTERN
from services.api.routes import outbox_trace
from services.api.store import Conn, Row
from services.core.feed import MAX_FOLLOWING

router = APIRouter(include_in_schema=False)
_HANDLE = re.compile(HANDLE_PATTERN)


def _acct(value: str | None, domain: str) -> str | None:
    """The local handle an `acct` (or search query) names: `alice`, `@alice`, `alice@<this domain>`."""
    if not value:
        return None
    name, _, host = value.strip().lstrip("@").partition("@")
    if host and host.lower() != domain.lower():
        return None
    name = name.lower()
    return name if _HANDLE.fullmatch(name) else None


@router.get("/api/v1/accounts/verify_credentials")
async def verify_credentials(request: Request) -> Response:
    async def mine(db: Conn, me: int) -> Row | None:
        return (await store.accounts(db, [me])).get(me)

    row = await read(request, "read:accounts", mine)
    if row is None:
        raise MastodonError(401, "The access token is invalid")
    return views.json(entities.account(row, views.site(request), source=True))


@router.get("/api/v1/accounts/lookup")
async def lookup(request: Request) -> Response:
    params = await gather(request)
    handle = _acct(params.text("acct", 400), views.site(request).domain)

    async def by_handle(db: Conn, _: int) -> Row | None:
        return None if handle is None else await store.account_by_handle(db, handle)

    row = await read(request, "read:accounts", by_handle)
    if row is None:
        raise not_found()
    return views.json(entities.account(row, views.site(request)))


@router.get("/api/v1/accounts/relationships")
async def relationships(request: Request) -> Response:
    params = await gather(request)
    ids = [int(i) for i in params.strings("id") if i.isascii() and i.isdigit() and 0 < int(i) < 2**63]
    rows = await read(request, "read:follows", lambda db, me: store.relationships(db, me, ids))
    return views.json([entities.relationship(int(r["id"]), following=r["following"], followed_by=r["followed_by"])
                       for r in rows])


@router.get("/api/v2/search")
async def search(request: Request) -> Response:
    """Accounts by handle (`q`: `alice`, `@alice`, `alice@<this domain>`; the exact one first, then those that
    start with it). Statuses and hashtags are not searched here: empty lists."""
    params = await gather(request)
    kind = params.text("type", 50)
    handle = _acct(params.text("q", 400), views.site(request).domain)
    limit = params.limit(pages.DEFAULT_LIMIT, pages.MAX_LIMIT)
    offset = params.position("offset") or 0

    async def found(db: Conn, _: int) -> list[Row]:
        if handle is None or kind not in (None, "accounts") or offset > 0:
            return []
        return await store.search_accounts(db, handle, limit)

    rows = await read(request, "read:search", found)
    here = views.site(request)
    return views.json({"accounts": [entities.account(r, here) for r in rows], "statuses": [], "hashtags": []})


@router.get("/api/v1/accounts/{account_id}")
async def get_account(account_id: str, request: Request) -> Response:
    user = record_id(account_id)
    row = await read(request, "read:accounts", lambda db, _: store.accounts(db, [user]))
    if user not in row:
        raise not_found()
    return views.json(entities.account(row[user], views.site(request)))


async def _relationship(db: Conn, me: int, user: int) -> Response:
    row = (await store.relationships(db, me, [user]))[0]
    return views.json(entities.relationship(user, following=row["following"], followed_by=row["followed_by"]))


@router.post("/api/v1/accounts/{account_id}/follow")
async def follow(account_id: str, request: Request) -> Response:
    user = record_id(account_id)
    await gather(request)  # reblogs, notify, languages: accepted and ignored
    with outbox_trace(request) as trace:
        async with write_session(request, "write:follows") as (db, me):
            if user == me:
                raise MastodonError(403, "This action is not allowed: you cannot follow yourself")
            try:
                if await api_store.set_follow(db, me, user, follow=True, trace=trace) is None:
                    raise not_found()
            except api_store.FollowLimit:
                raise MastodonError(422, f"Validation failed: you follow {MAX_FOLLOWING} accounts, the most "
                                         "allowed") from None
            return await _relationship(db, me, user)


@router.post("/api/v1/accounts/{account_id}/unfollow")
async def unfollow(account_id: str, request: Request) -> Response:
    user = record_id(account_id)
    with outbox_trace(request) as trace:
        async with write_session(request, "write:follows") as (db, me):
            if user != me and await api_store.set_follow(db, me, user, follow=False, trace=trace) is None:
                raise not_found()
            return await _relationship(db, me, user)


@router.get("/api/v1/accounts/{account_id}/statuses")
async def account_statuses(account_id: str, request: Request) -> Response:
    """The account's posts, newest first, paged as the home timeline. Pinned, replies, reblogs, media: walfeed has
    none, so `pinned=true` and `only_media=true` are empty."""
    user = record_id(account_id)
    params = await gather(request)
    limit = params.limit(pages.DEFAULT_LIMIT, pages.MAX_LIMIT)
    asked = pages.page_range(params, limit)
    empty = params.boolean("pinned") or params.boolean("only_media")

    async def posts_of(db: Conn, _: int) -> tuple[list[int], list[bytes], bool] | None:
        if not await api_store.user_exists(db, user):
            return None
        items, more = pages.cut(asked, [] if empty else await store.author_posts(db, user, asked), limit)
        return [int(r["id"]) for r in items], await views.status_json(request, db, items), more

    found = await read(request, "read:statuses", posts_of)
    if found is None:
        raise not_found()
    return views.status_listing(request, params, asked, *found)
