"""Postgres adapter of the Mastodon layer: each function one unit of work on an async connection (autocommit), as
services/api/store.py, whose posts, follows and home-timeline functions the routes use directly."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from services.api import paging
from services.api.mastodon import sql
from services.api.store import Conn, Row

STATUSES_CAP: Final = 10_000  # an account's statuses_count is counted up to this


async def _one(conn: Conn, query: Any, params: dict[str, Any]) -> Row | None:
    return await (await conn.execute(query, params)).fetchone()


async def _all(conn: Conn, query: Any, params: dict[str, Any]) -> list[Row]:
    return await (await conn.execute(query, params)).fetchall()


# OAuth

async def create_app(conn: Conn, client_id: str, secret_hash: bytes, name: str, website: str | None,
                     redirect_uris: Sequence[str], scopes: Sequence[str]) -> Row:
    row = await _one(conn, sql.CREATE_APP, {"client_id": client_id, "secret_hash": secret_hash, "name": name,
                                            "website": website, "redirect_uris": list(redirect_uris),
                                            "scopes": list(scopes)})
    assert row is not None
    return row


async def app(conn: Conn, client_id: str) -> Row | None:
    return await _one(conn, sql.APP, {"client_id": client_id})


async def credentials(conn: Conn, handle: str) -> Row | None:
    return await _one(conn, sql.CREDENTIALS, {"handle": handle})


async def create_code(conn: Conn, code_hash: bytes, app_id: int, user: int, redirect_uri: str,
                      scopes: Sequence[str], challenge: str | None, method: str | None, seconds: int) -> None:
    await conn.execute(sql.CREATE_CODE, {"code_hash": code_hash, "app": app_id, "user": user,
                                         "redirect_uri": redirect_uri, "scopes": list(scopes),
                                         "challenge": challenge, "method": method, "seconds": seconds})


async def take_code(conn: Conn, code_hash: bytes) -> Row | None:
    return await _one(conn, sql.TAKE_CODE, {"code_hash": code_hash})


async def create_token(conn: Conn, token_hash: bytes, app_id: int, user: int | None, scopes: Sequence[str]) -> Row:
    row = await _one(conn, sql.CREATE_TOKEN, {"hash": token_hash, "app": app_id, "user": user,
                                              "scopes": list(scopes)})
    assert row is not None
    return row


async def revoke_token(conn: Conn, token_hash: bytes, app_id: int) -> int | None:
    """Revoke the app's token; the user it was of (None: unknown, another app's, revoked already, or an app's own)."""
    row = await _one(conn, sql.REVOKE_TOKEN, {"hash": token_hash, "app": app_id})
    return None if row is None else int(row["user_id"])


async def grant(conn: Conn, token_hash: bytes) -> Row | None:
    return await _one(conn, sql.GRANT, {"hash": token_hash})


# Reads

async def accounts(conn: Conn, ids: Sequence[int]) -> dict[int, Row]:
    if not ids:
        return {}
    rows = await _all(conn, sql.ACCOUNTS, {"ids": list(ids), "cap": STATUSES_CAP})
    return {int(r["id"]): r for r in rows}


async def account_by_handle(conn: Conn, handle: str) -> Row | None:
    return await _one(conn, sql.ACCOUNT_BY_HANDLE, {"handle": handle, "cap": STATUSES_CAP})


async def search_accounts(conn: Conn, prefix: str, limit: int) -> list[Row]:
    return await _all(conn, sql.SEARCH_ACCOUNTS, {"prefix": prefix, "limit": limit, "cap": STATUSES_CAP})


async def relationships(conn: Conn, me: int, ids: Sequence[int]) -> list[Row]:
    return await _all(conn, sql.RELATIONSHIPS, {"me": me, "ids": list(ids)})


async def posts(conn: Conn, ids: Sequence[int]) -> dict[int, Row]:
    if not ids:
        return {}
    return {int(r["id"]): r for r in await _all(conn, sql.POSTS, {"ids": list(ids)})}


async def post_for_stream(conn: Conn, post_id: int) -> Row | None:
    return await _one(conn, sql.POST_FOR_STREAM, {"id": post_id})


async def counts(conn: Conn) -> Row:
    row = await _one(conn, sql.COUNTS, {})
    assert row is not None
    return row


async def author_posts(conn: Conn, author: int, page: paging.Range) -> list[Row]:
    return await _all(conn, sql.AUTHOR_POSTS[page.order], {"author": author, "after": page.after,
                                                           "before": page.before, "limit": page.fetch})


async def notifications(conn: Conn, user: int, kinds: Sequence[str], page: paging.Range) -> list[Row]:
    return await _all(conn, sql.NOTIFICATIONS[page.order], {"user": user, "kinds": list(kinds), "after": page.after,
                                                            "before": page.before, "limit": page.fetch})


async def notification(conn: Conn, user: int, notification_id: int) -> Row | None:
    return await _one(conn, sql.NOTIFICATION, {"user": user, "id": notification_id})


async def followees(conn: Conn, user: int) -> list[int]:
    return [int(r["followee_id"]) for r in await _all(conn, sql.FOLLOWEES, {"user": user})]
