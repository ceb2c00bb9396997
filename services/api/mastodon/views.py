"""From rows to the entities a route answers, with the I/O they need done in bulk: one statement for the
accounts of a page's authors (an account row is remembered ACCOUNT_SECONDS per process: handles never change,
counts may lag by that much), one for the posts of a page of notifications."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import orjson
from fastapi import Request, Response
from starlette.requests import HTTPConnection

from services.api import paging
from services.api.mastodon import entities, pages, store
from services.api.mastodon.entities import Site
from services.api.mastodon.params import Params
from services.api.store import Conn, Row
from services.api.ttlmap import TtlMap

ACCOUNT_SECONDS: Final = 5.0
MAX_ACCOUNTS: Final = 10_000
MAX_STATUSES: Final = 20_000  # serialized Statuses without their account (about 1 KB each): 20 MB per process
STATUS_SECONDS: Final = 600.0  # a post never changes (a deleted one is no longer read)


def account_cache() -> TtlMap[int, Row]:
    return TtlMap(ACCOUNT_SECONDS, MAX_ACCOUNTS)


def status_cache() -> TtlMap[tuple[str, int], bytes]:
    """(the site's base URL, post id) -> the Status as JSON up to its account (entities.status_head)."""
    return TtlMap(STATUS_SECONDS, MAX_STATUSES)


def account_json_cache() -> TtlMap[tuple[str, int], bytes]:
    """(the site's base URL, user id) -> the Account as JSON, for ACCOUNT_SECONDS (its counts lag that much)."""
    return TtlMap(ACCOUNT_SECONDS, MAX_ACCOUNTS)


def site(request: HTTPConnection) -> Site:
    base = f"{request.url.scheme}://{request.url.netloc}"
    return Site(base, request.url.netloc)


def streaming_url(request: HTTPConnection) -> str:
    return ("wss" if request.url.scheme == "https" else "ws") + f"://{request.url.netloc}"


def json(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type="application/json", headers=headers)


async def account_rows(cache: TtlMap[int, Row], db: Conn, ids: Sequence[int]) -> dict[int, Row]:
    found: dict[int, Row] = {}
    missing = []
    for user in dict.fromkeys(ids):
        row = cache.get(user)
        if row is None:
            missing.append(user)
        else:
            found[user] = row
    for user, row in (await store.accounts(db, missing)).items():
        cache.put(user, row)
        found[user] = row
    return found


async def accounts_for(cache: TtlMap[int, Row], db: Conn, ids: Sequence[int], here: Site) -> dict[int, dict[str, Any]]:
    return {user: entities.account(row, here) for user, row in (await account_rows(cache, db, ids)).items()}


async def statuses_for(cache: TtlMap[int, Row], db: Conn, rows: Sequence[Row], here: Site) -> list[dict[str, Any]]:
    """Statuses of posts rows, in their order (a post whose author is gone is left out)."""
    authors = await accounts_for(cache, db, [int(r["author_id"]) for r in rows], here)
    return [entities.status(r, authors[int(r["author_id"])], here) for r in rows if int(r["author_id"]) in authors]


async def notifications_for(cache: TtlMap[int, Row], db: Conn, rows: Sequence[Row],
                            here: Site) -> list[dict[str, Any]]:
    posts = await store.posts(db, [int(r["post_id"]) for r in rows if r["post_id"] is not None])
    people = await accounts_for(cache, db, [int(r["actor_id"]) for r in rows]
                                + [int(p["author_id"]) for p in posts.values()], here)
    found = []
    for r in rows:
        actor = people.get(int(r["actor_id"]))
        post = posts.get(int(r["post_id"])) if r["post_id"] is not None else None
        if actor is None or (r["post_id"] is not None and post is None):
            continue  # the mentioning post was deleted meanwhile (its notification is being withdrawn)
        status = None if post is None else entities.status(post, people[int(post["author_id"])], here)
        found.append(entities.notification(r, actor, status))
    return found


async def accounts(request: Request, db: Conn, ids: Sequence[int]) -> dict[int, dict[str, Any]]:
    return await accounts_for(request.app.state.mastodon_accounts, db, ids, site(request))


async def statuses(request: Request, db: Conn, rows: Sequence[Row]) -> list[dict[str, Any]]:
    return await statuses_for(request.app.state.mastodon_accounts, db, rows, site(request))


async def notifications(request: Request, db: Conn, rows: Sequence[Row]) -> list[dict[str, Any]]:
    return await notifications_for(request.app.state.mastodon_accounts, db, rows, site(request))


async def status_json(request: Request, db: Conn, rows: Sequence[Row]) -> list[bytes]:
    """The Statuses of posts rows as JSON, in their order, assembled from a post's serialized part (kept
    STATUS_SECONDS: it never changes) and its author's serialized Account (kept ACCOUNT_SECONDS): a page of the
    home timeline or of an account serializes only what another reader's page did not already."""
    heads: TtlMap[tuple[str, int], bytes] = request.app.state.mastodon_statuses
    people: TtlMap[tuple[str, int], bytes] = request.app.state.mastodon_account_json
    here = site(request)
    found: dict[int, bytes] = {}
    for row in rows:
        author = int(row["author_id"])
        account = people.get((here.base, author))
        if account is not None:
            found[author] = account
    missing = [int(r["author_id"]) for r in rows if int(r["author_id"]) not in found]
    for author, row in (await account_rows(request.app.state.mastodon_accounts, db, missing)).items():
        found[author] = orjson.dumps(entities.account(row, here))
        people.put((here.base, author), found[author])
    parts = []
    for row in rows:
        account = found.get(int(row["author_id"]))
        if account is None:
            continue  # the author is gone
        head = heads.get((here.base, int(row["id"])))
        if head is None:
            head = entities.status_head(row, orjson.loads(account)["username"], here)
            heads.put((here.base, int(row["id"])), head)
        parts.append(head + account + b"}")
    return parts


def status_listing(request: Request, params: Params, asked: paging.Range, ids: Sequence[int], parts: list[bytes],
                   more: bool) -> Response:
    """A page of Statuses already serialized (status_json), newest first, with its Link header."""
    link = pages.link(f"{site(request).base}{request.url.path}", params, asked, ids[0] if ids else None,
                      ids[-1] if ids else None, more)
    return Response(b"[" + b",".join(parts) + b"]", media_type="application/json",
                    headers={"Link": link} if link else None)


def listing(request: Request, params: Params, asked: paging.Range, items: list[dict[str, Any]],
            more: bool) -> Response:
    """A page of entities (newest first) with its Link header."""
    link = pages.link(f"{site(request).base}{request.url.path}", params, asked,
                      int(items[0]["id"]) if items else None, int(items[-1]["id"]) if items else None, more)
    return json(items, headers={"Link": link} if link else None)
