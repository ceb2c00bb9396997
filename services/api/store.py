"""Postgres adapter of the API: each function is one unit of work on an async connection in autocommit mode.
A write is either one statement (atomic on its own) or an explicit transaction, and writes its outbox event in it.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from typing import Any, Final, LiteralString

import psycopg
from psycopg import sql as pgsql
from psycopg.types.json import Jsonb

from services.api import paging, partitions, readafter, sql
from services.core import events, feed, mailtokens
from services.core.events import Event

log = logging.getLogger(__name__)

LAYOUT_REFRESH_SECONDS: Final = 60.0  # how soon a new partition layout (a split of ADR 0093) is named

Conn = psycopg.AsyncConnection[dict[str, Any]]
Row = dict[str, Any]
Query = LiteralString | bytes | pgsql.Composed  # a constant of services/api/sql.py


async def _one(conn: Conn, query: Query, params: dict[str, Any]) -> Row | None:
    return await (await conn.execute(query, params)).fetchone()


async def _all(conn: Conn, query: Query, params: dict[str, Any]) -> list[Row]:
    return await (await conn.execute(query, params)).fetchall()


async def _outbox(conn: Conn, event: Event, trace: str | None) -> None:
    """The event's outbox row; `trace`: its tracingspancontext column (services/core/tracecontext.py), or None."""
    await conn.execute(sql.INSERT_OUTBOX, {
        "id": event.id, "aggregatetype": event.aggregate_type, "aggregateid": event.aggregate_id,
        "type": event.type, "payload": Jsonb(event.payload), "trace": trace,
    })


async def authenticate(conn: Conn, token_hash: bytes) -> Row | None:
    return await _one(conn, sql.AUTHENTICATE, {"hash": token_hash})


async def create_user(conn: Conn, handle: str, token_hash: bytes, password_hash: str | None = None) -> Row | None:
    """The new user, or None when the handle is taken."""
    return await _one(conn, sql.CREATE_USER, {"handle": handle, "hash": token_hash, "password": password_hash})


async def set_password(conn: Conn, user: int, password_hash: str) -> None:
    await conn.execute(sql.SET_PASSWORD, {"id": user, "password": password_hash})


async def set_token(conn: Conn, user: int, token_hash: bytes) -> None:
    """Replace the user's token hash and notify every api process (revocations.CHANNEL)."""
    await conn.execute(sql.SET_TOKEN, {"id": user, "hash": token_hash})


async def get_user(conn: Conn, user_id: int) -> Row | None:
    return await _one(conn, sql.GET_USER, {"id": user_id})


async def user_exists(conn: Conn, user_id: int) -> bool:
    return await _one(conn, sql.USER_EXISTS, {"id": user_id}) is not None


async def rate_limit_hit(conn: Conn, key: str, window: int, limit: int) -> Row:
    """Count a request in `key`'s current window: its hits (this one included), window_start and the db's now."""
    row = await _one(conn, sql.RATE_LIMIT_HIT, {"limit_key": key, "window": window, "cap": limit + 1})
    assert row is not None  # an UPSERT ... RETURNING always returns its row
    return row


class FollowLimit(Exception):
    """Following one more account would exceed feed.MAX_FOLLOWING (nothing was written)."""


async def set_follow(conn: Conn, follower: int, followee: int, *, follow: bool,
                     trace: str | None = None) -> bool | None:
    """Follow or unfollow. True when the relation changed, False when it already was so, None: unknown user.
    Raises FollowLimit (and rolls back) when a new follow would exceed feed.MAX_FOLLOWING: the count is read
    under the follower's row lock, so concurrent follows cannot both pass the cap. The pair of users rows is
    locked before the follows row is touched (sql.LOCK_PAIR: docs/adr/0152)."""
    params = {"follower": follower, "followee": followee}
    async with conn.transaction():
        await conn.execute(sql.LOCK_PAIR, {"ids": sorted((follower, followee))})
        changed = await _one(conn, sql.FOLLOW if follow else sql.UNFOLLOW, params) is not None
        if changed:
            counts = await _all(conn, sql.ADJUST_COUNTS, {**params, "delta": 1 if follow else -1})
            if follow and any(r["id"] == follower and r["following_count"] > feed.MAX_FOLLOWING for r in counts):
                raise FollowLimit
            kind = events.FOLLOW_CREATED if follow else events.FOLLOW_DELETED
            await _outbox(conn, Event.new(kind, f"{follower}:{followee}",
                                          {"follower_id": follower, "followee_id": followee}), trace)
            return True
    return False if await user_exists(conn, followee) else None


async def create_post(conn: Conn, author: int, body: str, key: str | None,
                      request_hash: bytes | None, trace: str | None = None) -> tuple[Row, bool]:
    """(post, created). With a key already used by this author: (the original post with its request_hash, False).
    One statement, one round trip: the post and its post.created outbox row (sql.CREATE_POST)."""
    row = await _one(conn, sql.CREATE_POST, {"author": author, "body": body, "key": key, "hash": request_hash,
                                             "trace": trace})
    if row is not None:
        return row, True
    return await _replayed(conn, author, body, key, request_hash, trace)


async def create_counted_post(conn: Conn, limit_key: str, window: int, limit: int, author: int, body: str,
                              key: str | None, request_hash: bytes | None,
                              trace: str | None = None) -> tuple[Row, Row | None, bool]:
    """(the rate-limit hit as rate_limit_hit returns it, the post or None when over `limit`, created): the hit
    counted and the post written in one statement (sql.CREATE_POST_COUNTED); a used key as in create_post."""
    row = await _one(conn, sql.CREATE_POST_COUNTED, {
        "limit_key": limit_key, "window": window, "cap": limit + 1, "limit": limit,
        "author": author, "body": body, "key": key, "hash": request_hash, "trace": trace})
    assert row is not None  # the hit's row always comes back
    hit = {"hits": row["hits"], "window_start": row["window_start"], "now": row["now"]}
    if row["hits"] > limit:
        return hit, None, False
    if row["id"] is not None:
        return hit, {k: row[k] for k in ("id", "author_id", "body", "created_at")}, True
    return hit, *await _replayed(conn, author, body, key, request_hash, trace)


async def _replayed(conn: Conn, author: int, body: str, key: str | None, request_hash: bytes | None,
                    trace: str | None) -> tuple[Row, bool]:
    """The post an insert found by its Idempotency-Key."""
    # The key exists (committed: ON CONFLICT waited for a concurrent insert of the same key to finish).
    original = await _one(conn, sql.POST_BY_KEY, {"author": author, "key": key})
    if original is None:  # the conflicting insert rolled back after all: try again (counted once already)
        return await create_post(conn, author, body, key, request_hash, trace)
    return original, False


async def get_post(conn: Conn, post_id: int) -> Row | None:
    return await _one(conn, sql.GET_POST, {"id": post_id})


async def delete_post(conn: Conn, post_id: int, author: int, trace: str | None = None) -> Row | None:
    """Soft-delete the caller's post. None when nothing was deleted (unknown, deleted already, or not theirs)."""
    async with conn.transaction():
        row = await _one(conn, sql.DELETE_POST, {"id": post_id, "author": author})
        if row is not None:
            await _outbox(conn, Event.new(events.POST_DELETED, post_id, {"post_id": post_id, "author_id": author}),
                          trace)
    return row


async def author_posts(conn: Conn, author: int, before: int, fetch: int) -> list[Row]:
    return await _all(conn, sql.AUTHOR_POSTS, {"author": author, "before": before, "limit": fetch})


class TimelinePartitions:
    """Which partition of timelines each reader's home read names (docs/adr/0153): the layout read from the catalog
    by a read at most every `refresh` seconds; a read that finds it wrong (the partition gone, not readable, or no
    longer with the constraint it had) forgets it until then, and reads through the parent meanwhile."""

    def __init__(self, refresh: float = LAYOUT_REFRESH_SECONDS, clock: Callable[[], float] = time.monotonic) -> None:
        self._layout: partitions.Layout | None = None
        self._refresh, self._clock = refresh, clock
        self._due = -math.inf

    async def of(self, conn: Conn, user: int) -> partitions.Partition | None:
        """The reader's partition, or None: read through the parent."""
        if (now := self._clock()) >= self._due:
            self._due = now + self._refresh  # before the await: one refresh at a time
            self._layout = None
            try:
                self._layout = partitions.Layout.parse(await _all(conn, partitions.LAYOUT, {}))
            except psycopg.Error as exc:  # the read goes on through the parent, and fails there if it must
                log.warning("partition layout not read", extra={"error": type(exc).__name__,
                                                                "action": "partition_layout_unread"})
        return None if self._layout is None else self._layout.of(user)

    def wrong(self, partition: partitions.Partition, reason: str) -> None:
        log.warning("home read through the parent until the partition layout is read again",
                    extra={"partition": partition.name, "reason": reason, "action": "partition_layout_wrong"})
        self._layout = None


async def home_timeline(conn: Conn, user: int, page: paging.Range,
                        partitions: TimelinePartitions | None = None) -> list[Row]:
    """Up to `page.fetch` posts of the home timeline within the page's range, in its order: one statement in the
    common case; another for a reader of more celebrities than the page has rows or with an unfollow the worker has
    not processed yet (the first one's page is thrown away: docs/adr/0155, 0156), and one for the part of the range
    below the reader's floor (docs/adr/0096). The page above the floor and the one below are snapshots of their own:
    their id ranges do not overlap, so no post appears twice. With `partitions`, the reads above the floor name the
    reader's partition of timelines (docs/adr/0153)."""
    params = {"user": user, "after": page.after, "before": page.before, "limit": page.fetch}
    found = await _above_floor(conn, page, params, partitions)
    floor = int(found[0]["floor"]) if found else 0
    above = found[1:]
    rest = paging.below_floor(page, floor, len(above))
    if rest is None:
        return above
    below = await _all(conn, sql.HOME_BELOW_FLOOR[rest.order], {
        "user": user, "after": rest.after, "before": rest.before, "limit": rest.fetch})
    return paging.combine(page, above, below)


async def _above_floor(conn: Conn, page: paging.Range, params: dict[str, Any],
                       names: TimelinePartitions | None) -> list[Row]:
    """sql.HOME_ABOVE_FLOOR's rows (the reader's, then the page); when the reader's row says `again`,
    sql.HOME_ABOVE_FLOOR_CAREFUL's instead, a second statement (docs/adr/0156)."""
    found = await _above_floor_as(conn, page, params, names, careful=False)
    if found and found[0]["again"]:
        return await _above_floor_as(conn, page, params, names, careful=True)
    return found


async def _above_floor_as(conn: Conn, page: paging.Range, params: dict[str, Any], names: TimelinePartitions | None,
                          *, careful: bool) -> list[Row]:
    """One form of the read above the floor, through the reader's partition when its name can be trusted."""
    if names is not None and (partition := await names.of(conn, params["user"])) is not None:
        query = sql.home_above_floor(page.order, partition.schema, partition.name, partition.constraint, careful)
        try:
            found = await _all(conn, query, params)
        except (psycopg.errors.UndefinedTable, psycopg.errors.InsufficientPrivilege) as exc:
            names.wrong(partition, type(exc).__name__)
        else:
            if not found or found[0]["placed"]:
                return found
            names.wrong(partition, "constraint changed")
    return await _all(conn, (sql.HOME_ABOVE_FLOOR_CAREFUL if careful else sql.HOME_ABOVE_FLOOR)[page.order], params)


# Notifications (docs/notifications.md).

UNREAD_CAP = 10_000  # unread notifications counted at most (models.NotificationPage)


async def notifications(conn: Conn, user: int, before: int, fetch: int) -> tuple[list[Row], int]:
    """Up to `fetch` of the user's notifications below `before`, newest first, and the unread count, in one
    snapshot (the count agrees with the page)."""
    async with conn.transaction():
        await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        rows = await _all(conn, sql.NOTIFICATIONS, {"user": user, "before": before, "limit": fetch})
        count = await _one(conn, sql.UNREAD_COUNT, {"user": user, "cap": UNREAD_CAP})
    assert count is not None  # an aggregate always returns its row
    return rows, int(count["unread"])


async def mark_read(conn: Conn, user: int, up_to: int) -> int:
    """Move the user's read marker up to `up_to` (never down, never above their newest notification); returns what
    is still unread."""
    await conn.execute(sql.MARK_READ, {"user": user, "up_to": up_to})
    count = await _one(conn, sql.UNREAD_COUNT, {"user": user, "cap": UNREAD_CAP})
    assert count is not None
    return int(count["unread"])


async def get_me(conn: Conn, user: int) -> Row:
    """The caller's account. Raises readafter.NotReplayed when it is not there: the caller was just authenticated on
    the primary, so only a replica that has not replayed their sign-up lacks it."""
    row = await _one(conn, sql.GET_ME, {"id": user})
    if row is None:
        raise readafter.NotReplayed(f"user {user}")
    return row


async def update_me(conn: Conn, user: int, *, set_email: bool, email: str | None,
                    kinds: Sequence[str] | None) -> Row:
    """Set the email address (when `set_email`; None removes it) and the kinds mailed (when not None)."""
    row = await _one(conn, sql.UPDATE_ME, {"id": user, "set_email": set_email, "email": email, "kinds": kinds})
    assert row is not None
    return row


async def mail_token_key(conn: Conn, user: int) -> tuple[str | None, bytes] | None:
    """The user's address and the key that signed their mail tokens; None if there is no such user."""
    row = await _one(conn, sql.MAIL_TOKEN_KEY, {"id": user, "name": mailtokens.KEY_NAME})
    return None if row is None else (row["email"], bytes(row["key"]))


async def verify_email(conn: Conn, user: int, email: str) -> Row | None:
    """Mark `email` verified if it is still the user's address (as GET_ME); None otherwise."""
    return await _one(conn, sql.VERIFY_EMAIL, {"id": user, "email": email})


async def unsubscribe(conn: Conn, user: int, kind: str, email: str) -> bool:
    """No more mail of `kind` to `email` (if it is still the user's address)."""
    return await _one(conn, sql.UNSUBSCRIBE, {"id": user, "kind": kind, "email": email}) is not None


# Webhooks (docs/notifications.md): every function is scoped to the owner.

class WebhookLimit(Exception):
    """The owner has MAX_WEBHOOKS webhooks already (nothing was written)."""


MAX_WEBHOOKS = 10  # per user: each is a delivery per notification, and a user needs one or two


async def create_webhook(conn: Conn, owner: int, url: str, kinds: Sequence[str], secret: str) -> Row:
    """The new webhook's row (the secret is not in it). Raises WebhookLimit."""
    async with conn.transaction():
        await conn.execute(sql.LOCK_USER, {"id": owner})
        count = await _one(conn, sql.COUNT_WEBHOOKS, {"owner": owner})
        if count is not None and count["n"] >= MAX_WEBHOOKS:
            raise WebhookLimit
        created = await _one(conn, sql.CREATE_WEBHOOK, {"owner": owner, "url": url, "events": kinds,
                                                        "secret": secret})
        assert created is not None
        return (await webhooks(conn, owner, created["id"]))[0]


async def webhooks(conn: Conn, owner: int, webhook_id: int | None = None) -> list[Row]:
    """The owner's webhooks, or the one `webhook_id` (an empty list if it is not theirs)."""
    return await _all(conn, sql.WEBHOOKS, {"owner": owner, "id": webhook_id})


async def delete_webhook(conn: Conn, owner: int, webhook_id: int) -> bool:
    """Delete the webhook and its deliveries' history (ON DELETE CASCADE); False if it is not the owner's."""
    return await _one(conn, sql.DELETE_WEBHOOK, {"owner": owner, "id": webhook_id}) is not None


async def rotate_secret(conn: Conn, owner: int, webhook_id: int, secret: str, overlap: int) -> Row | None:
    """The new secret signs from now; the previous one too for `overlap` seconds. None if not the owner's."""
    return await _one(conn, sql.ROTATE_SECRET, {"owner": owner, "id": webhook_id, "secret": secret,
                                                "overlap": overlap})


async def enable_webhook(conn: Conn, owner: int, webhook_id: int) -> bool:
    return await _one(conn, sql.ENABLE_WEBHOOK, {"owner": owner, "id": webhook_id}) is not None


async def ping(conn: Conn, owner: int, webhook_id: int) -> int | None:
    """A delivery without notification and its delivery.webhook event; None if the webhook is not the owner's or
    is disabled."""
    row = await _one(conn, sql.PING, {"owner": owner, "id": webhook_id})
    return None if row is None else int(row["id"])


async def webhook_deliveries(conn: Conn, webhook_id: int, before: int, fetch: int) -> list[Row]:
    """The webhook's deliveries below `before`, newest first (the caller checked the webhook is theirs)."""
    return await _all(conn, sql.WEBHOOK_DELIVERIES, {"id": webhook_id, "before": before, "limit": fetch})


async def retry_delivery(conn: Conn, owner: int, webhook_id: int, delivery_id: int) -> tuple[bool, str | None]:
    """PENDING again with a new delivery.webhook event: (True, 'PENDING') when done; else (False, the delivery's
    status as it is, or None when the webhook or delivery is not the owner's)."""
    if await _one(conn, sql.RETRY_DELIVERY, {"owner": owner, "id": webhook_id, "delivery": delivery_id}):
        return True, "PENDING"
    row = await _one(conn, sql.DELIVERY_STATUS, {"owner": owner, "id": webhook_id, "delivery": delivery_id})
    return False, None if row is None else str(row["status"])
