"""The critical effects of each event on the database (retried on failure). Adapter: psycopg 3 + the SQL in sql.py.

Every effect is idempotent and re-checks current state inside a transaction that holds the author's advisory
lock, so duplicates and reordering converge (docs/adr/0022). Returns a short label of what was done.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Any, Final, TypeVar

import psycopg
from psycopg_pool import ConnectionPool

from services.core import events as ev
from services.core.feed import BACKFILL_LIMIT, TIMELINE_CAP
from services.worker import policy
from services.worker import sql as q

log = logging.getLogger(__name__)
T = TypeVar("T")

CONSUMER: Final = "fanout"  # processed_events.consumer of this worker
# Followers per fan-out transaction: one set-based INSERT each, so no transaction holds locks for long.
FANOUT_CHUNK_SIZE: Final = 1000

Conn = psycopg.Connection[Any]


class PostMissing(policy.Expected):
    """post.created names a post that does not exist: the data is inconsistent; retried, then dead-lettered."""


class NotVisibleYet(policy.Expected):
    """The event's transaction is not visible to this worker yet (see sql.EVENT_VISIBLE): retried shortly."""


class Effects:
    def __init__(self, pool: ConnectionPool, celebrity_threshold: int, *,
                 chunk_size: int = FANOUT_CHUNK_SIZE, cap: int = TIMELINE_CAP,
                 should_stop: Callable[[], bool] = lambda: False) -> None:
        self._pool = pool
        self._should_stop = should_stop
        self._threshold = celebrity_threshold
        self._chunk = chunk_size
        self._cap = cap
        self._handlers: dict[str, Callable[[Conn, ev.Event], str]] = {
            ev.POST_CREATED: self._post_created,
            ev.POST_DELETED: self._post_deleted,
            ev.FOLLOW_CREATED: self._follow_created,
            ev.FOLLOW_DELETED: self._follow_deleted,
        }

    def handle(self, event: ev.Event) -> str:
        with self._pool.connection() as conn:
            return self._handlers[event.type](conn, event)

    # post.created: decide once, then push in chunks (or nothing, for a pulled post).
    def _post_created(self, conn: Conn, event: ev.Event) -> str:
        post_id, author_id = event.payload["post_id"], event.payload["author_id"]
        with conn.transaction():
            if _processed(conn, event.id):
                return "duplicate"
            conn.execute(q.LOCK_AUTHOR_SHARED, {"author_id": author_id})
            row = _read_when_visible(conn, event,
                                     lambda: conn.execute(q.POST_FOR_FANOUT, {"post_id": post_id}).fetchone())
            if row is None:
                raise PostMissing(f"post {post_id} does not exist")
            if row["author_id"] != author_id:
                raise PostMissing(f"post {post_id} has author {row['author_id']}, the event says {author_id}")
            if row["deleted"]:
                _mark(conn, event.id)
                return "deleted"
            pushed = self._decide(conn, post_id, row["fanned_out"], row["follower_count"])
            if not pushed:
                _mark(conn, event.id)
                return "pulled"
            conn.execute(q.INSERT_OWN, {"post_id": post_id})
        after = 0
        while True:
            with conn.transaction():
                conn.execute(q.LOCK_AUTHOR_SHARED, {"author_id": author_id})
                args = {"author_id": author_id, "post_id": post_id, "after": after, "limit": self._chunk}
                chunk = conn.execute(q.FANOUT_CHUNK, args).fetchone()
                assert chunk is not None
                done = not chunk["alive"] or chunk["n"] < self._chunk
                if done:
                    _mark(conn, event.id)
            if chunk["n"] and policy.should_trim(post_id):
                self._trim_chunk(conn, author_id, after, chunk["last"])
            if done:
                return "pushed" if chunk["alive"] else "deleted"
            after = chunk["last"]
            if self._should_stop():
                raise policy.Interrupted(f"stopping after follower {after}")  # resumes idempotently on redelivery

    def _decide(self, conn: Conn, post_id: int, recorded: bool | None, follower_count: int) -> bool:
        if recorded is not None:
            return recorded
        push = policy.push(follower_count, self._threshold)
        if conn.execute(q.RECORD_DECISION, {"post_id": post_id, "push": push}).fetchone() is None:
            decided = conn.execute(q.READ_DECISION, {"post_id": post_id}).fetchone()
            assert decided is not None and decided["fanned_out"] is not None
            return bool(decided["fanned_out"])
        return push

    def _post_deleted(self, conn: Conn, event: ev.Event) -> str:
        with conn.transaction():
            conn.execute(q.LOCK_AUTHOR, {"author_id": event.payload["author_id"]})
            conn.execute(q.DELETE_POST, {"post_id": event.payload["post_id"]})
        return "removed"

    def _follow_created(self, conn: Conn, event: ev.Event) -> str:
        args = dict(event.payload)
        with conn.transaction():
            conn.execute(q.LOCK_AUTHOR, {"author_id": args["followee_id"]})
            if _processed(conn, event.id):
                return "duplicate"
            exists = _read_when_visible(conn, event,
                                        lambda: conn.execute(q.FOLLOW_EXISTS, args).fetchone() is not None)
            if not exists:
                _mark(conn, event.id)
                return "gone"
            _mark(conn, event.id)
            found = conn.execute(q.BACKFILL, {**args, "limit": BACKFILL_LIMIT}).fetchone()
            assert found is not None
            floor = policy.backfill_floor(found["found"], found["smallest"], BACKFILL_LIMIT)
            if floor is not None:
                conn.execute(q.RAISE_FLOOR, {"floor": floor, "user_id": args["follower_id"]})
            trim(conn, [args["follower_id"]], self._cap)
        return "backfilled"

    def _follow_deleted(self, conn: Conn, event: ev.Event) -> str:
        with conn.transaction():
            conn.execute(q.LOCK_AUTHOR, {"author_id": event.payload["followee_id"]})
            removed = _read_when_visible(conn, event, lambda: conn.execute(q.UNFOLLOW, event.payload).rowcount)
        return "removed" if removed else "kept"

    def _trim_chunk(self, conn: Conn, author_id: int, after: int, last: int) -> None:
        """Best effort: a failed trim leaves a timeline a little over the cap until its next trim."""
        try:
            with conn.transaction():
                users = [r["follower_id"] for r in conn.execute(
                    q.CHUNK_FOLLOWERS, {"author_id": author_id, "after": after, "last": last})]
                trim(conn, users, self._cap)
        except psycopg.errors.DeadlockDetected as exc:
            log.warning("timeline trim skipped", extra={"author_id": author_id, "error": repr(exc)})


def trim(conn: Conn, user_ids: list[int], cap: int) -> int:
    """Keep each user's newest `cap` rows; raise the floor where rows went. Returns how many users were trimmed."""
    if not user_ids:
        return 0
    return len(conn.execute(q.TRIM, {"user_ids": sorted(user_ids), "keep": cap}).fetchall())


def _read_when_visible(conn: Conn, event: ev.Event, read: Callable[[], T]) -> T:
    """`read()`, trusted when it finds something; when it finds nothing (a falsy result: no row, no match), that
    absence is trusted only once the event's own transaction is visible (its outbox row is, docs/adr/0022): else
    NotVisibleYet, and the event is retried. Under READ COMMITTED every statement takes a new snapshot, so the first
    read may predate the transaction becoming visible: it is read again after the check, which a later snapshot
    passes only if it sees the transaction."""
    found = read()
    if not found:
        _require_visible(conn, event)
        found = read()
    return found


def _require_visible(conn: Conn, event: ev.Event) -> None:
    """NotVisibleYet unless the event's transaction is visible (its own outbox row is)."""
    if conn.execute(q.EVENT_VISIBLE, {"event_id": event.id}).fetchone() is None:
        raise NotVisibleYet(f"{event.type} {event.id}: its transaction is not visible yet")


def _processed(conn: Conn, event_id: uuid.UUID) -> bool:
    return conn.execute(q.ALREADY_PROCESSED, {"consumer": CONSUMER, "event_id": event_id}).fetchone() is not None


def _mark(conn: Conn, event_id: uuid.UUID) -> None:
    conn.execute(q.MARK_PROCESSED, {"consumer": CONSUMER, "event_id": event_id})
