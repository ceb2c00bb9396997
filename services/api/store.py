"""Postgres adapter of the API: each function is one unit of work on a connection (autocommit mode; writes
open their own transaction, and write the outbox event in it)."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from services.api import paging, sql
from services.core import events
from services.core.events import Event

Conn = psycopg.Connection[dict[str, Any]]
Row = dict[str, Any]


def _outbox(conn: Conn, event: Event) -> None:
    conn.execute(sql.INSERT_OUTBOX, {
        "id": event.id, "aggregatetype": event.aggregate_type, "aggregateid": event.aggregate_id,
        "type": event.type, "payload": Jsonb(event.payload),
    })


def authenticate(conn: Conn, token_hash: bytes) -> Row | None:
    return conn.execute(sql.AUTHENTICATE, {"hash": token_hash}).fetchone()


def create_user(conn: Conn, handle: str, token_hash: bytes) -> Row | None:
    """The new user, or None when the handle is taken."""
    return conn.execute(sql.CREATE_USER, {"handle": handle, "hash": token_hash}).fetchone()


def get_user(conn: Conn, user_id: int) -> Row | None:
    return conn.execute(sql.GET_USER, {"id": user_id}).fetchone()


def user_exists(conn: Conn, user_id: int) -> bool:
    return conn.execute(sql.USER_EXISTS, {"id": user_id}).fetchone() is not None


def set_follow(conn: Conn, follower: int, followee: int, *, follow: bool) -> bool | None:
    """Follow or unfollow. True when the relation changed, False when it already was so, None: unknown user."""
    params = {"follower": follower, "followee": followee}
    with conn.transaction():
        changed = conn.execute(sql.FOLLOW if follow else sql.UNFOLLOW, params).fetchone() is not None
        if changed:
            conn.execute(sql.LOCK_PAIR, {"ids": sorted((follower, followee))})
            conn.execute(sql.ADJUST_COUNTS, {**params, "delta": 1 if follow else -1})
            kind = events.FOLLOW_CREATED if follow else events.FOLLOW_DELETED
            _outbox(conn, Event.new(kind, f"{follower}:{followee}",
                                    {"follower_id": follower, "followee_id": followee}))
            return True
    return False if user_exists(conn, followee) else None


def create_post(conn: Conn, author: int, body: str, key: str | None, request_hash: bytes | None) -> tuple[Row, bool]:
    """(post, created). With a key already used by this author: (the original post with its request_hash, False)."""
    # Pipeline mode: [BEGIN, INSERT post] then [INSERT outbox, COMMIT]: two round trips, not four.
    with conn.pipeline(), conn.transaction():
        row = conn.execute(sql.INSERT_POST, {"author": author, "body": body, "key": key,
                                             "hash": request_hash}).fetchone()
        if row is not None:
            _outbox(conn, Event.new(events.POST_CREATED, row["id"], {"post_id": row["id"], "author_id": author}))
            return row, True
    # The key exists (committed: ON CONFLICT waited for a concurrent insert of the same key to finish).
    original = conn.execute(sql.POST_BY_KEY, {"author": author, "key": key}).fetchone()
    if original is None:  # the conflicting insert rolled back after all: try again
        return create_post(conn, author, body, key, request_hash)
    return original, False


def get_post(conn: Conn, post_id: int) -> Row | None:
    return conn.execute(sql.GET_POST, {"id": post_id}).fetchone()


def delete_post(conn: Conn, post_id: int, author: int) -> Row | None:
    """Soft-delete the caller's post. None when nothing was deleted; then see post_owner()."""
    with conn.transaction():
        row = conn.execute(sql.DELETE_POST, {"id": post_id, "author": author}).fetchone()
        if row is not None:
            _outbox(conn, Event.new(events.POST_DELETED, post_id, {"post_id": post_id, "author_id": author}))
    return row


def post_owner(conn: Conn, post_id: int) -> Row | None:
    return conn.execute(sql.POST_OWNER, {"id": post_id}).fetchone()


def author_posts(conn: Conn, author: int, before: int, fetch: int) -> list[Row]:
    return conn.execute(sql.AUTHOR_POSTS, {"author": author, "before": before, "limit": fetch}).fetchall()


def home_timeline(conn: Conn, user: int, before: int | None, fetch: int) -> list[Row]:
    """Up to `fetch` posts of the home timeline below `before`, newest first: at most three index-backed
    statements in one read-only snapshot, whatever the number of followed accounts."""
    rows: list[Row] = []
    with conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        floor_row = conn.execute(sql.TIMELINE_FLOOR, {"user": user}).fetchone()
        floor = int(floor_row["timeline_floor"]) if floor_row else 0
        segment: paging.Segment | None = paging.first_segment(before, floor)
        while segment is not None and len(rows) < fetch:
            query = sql.TIMELINE_ABOVE_FLOOR if segment.source == "materialized" else sql.TIMELINE_FAN_IN
            rows += conn.execute(query, {"user": user, "before": segment.before, "floor": segment.floor,
                                         "limit": fetch - len(rows)}).fetchall()
            segment = paging.next_segment(segment, len(rows), fetch)
    return rows
