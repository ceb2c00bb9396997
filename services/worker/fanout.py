"""The database effects of the fan-out (docs/adr/0022, 0024). Adapter: psycopg 3 + the SQL in sql.py; the
decisions are decide.py's and policy.py's.

`Effects.apply` applies a batch of events in one transaction with a constant number of set-based statements per
event type: the author locks in one global order, one lookup of the events' outbox rows and processed records,
then the effects of each type, each re-checking current state. A post whose audience is larger than a chunk is
not fanned out in the batch: `fan_out_large` does it in chunks of followers, one short transaction each.
"""

from __future__ import annotations

import logging
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any, Final

import psycopg
from psycopg.sql import SQL
from psycopg_pool import ConnectionPool

from services.consumer import outbox
from services.consumer.outbox_db import Conn, apply_batch, mark_processed, real_and_new
from services.consumer.outcomes import Expected, Interrupted, Poison
from services.core import events as ev
from services.core.feed import BACKFILL_LIMIT, TIMELINE_CAP
from services.worker import decide, policy
from services.worker import sql as q

log = logging.getLogger(__name__)

CONSUMER: Final = "fanout"  # processed_events.consumer of this worker
# Followers per fan-out transaction of a large post, and the largest audience a batch fans out itself: a batch of
# small posts is never held behind a large one (those are fanned out apart, on their own threads).
FANOUT_CHUNK_SIZE: Final = 1000

Applied = str | Expected | Poison  # per event: what was done, or why it was not


class Effects:
    def __init__(self, pool: ConnectionPool, celebrity_threshold: int, *,
                 chunk_size: int = FANOUT_CHUNK_SIZE, cap: int = TIMELINE_CAP,
                 should_stop: Callable[[], bool] = lambda: False) -> None:
        self._pool = pool
        self._should_stop = should_stop
        self._threshold = celebrity_threshold
        self._chunk = chunk_size
        self._cap = cap

    def handle(self, event: ev.Event) -> str:
        """One event on its own, large fan-out included: what was done, or its failure raised."""
        done = self.apply([event])[event]
        if isinstance(done, Exception):
            raise done
        return self.fan_out_large(event) if done == decide.LARGE else done

    def apply(self, events: Iterable[ev.Event]) -> dict[ev.Event, Applied]:
        """Apply a batch in one transaction. Per event: a label of what was done (decide.LARGE: the audience is
        still to be fanned out by `fan_out_large`), or the failure of that event alone. Raises if the transaction
        fails: nothing of the batch was applied."""
        return apply_batch(self._pool, events, self._apply)

    def _apply(self, conn: Conn, unique: list[ev.Event]) -> dict[ev.Event, Applied]:
        done: dict[ev.Event, Applied] = {}
        keys, exclusive = decide.locks(unique)
        with conn.transaction():
            conn.execute(q.LOCK_AUTHORS, {"keys": keys, "exclusive": exclusive})
            real: dict[str, list[ev.Event]] = defaultdict(list)
            for event in real_and_new(conn, CONSUMER, unique, done):
                real[event.type].append(event)
            trim, pushed = self._posts_created(conn, real[ev.POST_CREATED], done)
            self._posts_deleted(conn, real[ev.POST_DELETED], done)
            self._follows_created(conn, real[ev.FOLLOW_CREATED], done)
            self._follows_deleted(conn, real[ev.FOLLOW_DELETED], done)
        if trim is not None:
            self._trim(conn, q.TRIM_DUE, trim)
        log.debug("batch applied", extra={"events": len(unique), "pushed": pushed})
        return done

    def _posts_created(self, conn: Conn, events: list[ev.Event],
                       done: dict[ev.Event, Applied]) -> tuple[dict[str, list[int]] | None, int]:
        """Decide push or pull once per post and fan small audiences out. No processed record: a duplicate finds
        the decision recorded and inserts nothing new (a row the cap trimmed meanwhile comes back below the floor,
        where rows may be, docs/adr/0024). Returns sql.TRIM_DUE's arguments when a post is due a trim (None if none is),
        and how many posts were pushed."""
        if not events:
            return None, 0
        rows = {r["id"]: decide.PostRow(r["author_id"], r["deleted"], r["fanned_out"], r["follower_count"])
                for r in conn.execute(q.POSTS_FOR_FANOUT, {"post_ids": [e.payload["post_id"] for e in events]})}
        proposed: dict[int, bool] = {}
        for event in events:
            row = rows.get(event.payload["post_id"])
            if row is not None and row.fanned_out is None and not row.deleted:
                proposed[event.payload["post_id"]] = policy.push(row.follower_count, self._threshold)
        decisions = self._record_decisions(conn, proposed)
        for event in events:
            post_id = event.payload["post_id"]
            row = rows.get(post_id)
            try:
                done[event] = decide.post_action(
                    event, row, decisions.get(post_id, row.fanned_out if row else None), self._chunk)
            except outbox.PostMissing as exc:
                done[event] = exc
        pushed = [e for e in events if done[e] == decide.PUSHED]
        decided = [e for e in events if done[e] in decide.DECIDED]
        own = sorted({e.payload["post_id"]: done[e] == decide.PUSHED for e in decided}.items())
        if own:
            conn.execute(q.FANOUT_BATCH, {"own": [p for p, _ in own], "fan_out": [f for _, f in own]})
        due = [e for e in decided if policy.should_trim(e.payload["post_id"])]
        if not due:
            return None, len(pushed)
        # the followers of small pushed posts' authors (a large post's are trimmed by its chunks), and every author
        return {"audiences": sorted({e.payload["author_id"] for e in due if done[e] == decide.PUSHED}),
                "authors": sorted({e.payload["author_id"] for e in due})}, len(pushed)

    def _record_decisions(self, conn: Conn, proposed: dict[int, bool]) -> dict[int, bool]:
        """Record the proposed decisions of undecided posts; a post decided meanwhile keeps its recorded one."""
        if not proposed:
            return {}
        ids = sorted(proposed)
        recorded = {r["id"] for r in conn.execute(
            q.RECORD_DECISIONS, {"post_ids": ids, "push": [proposed[i] for i in ids]})}
        decisions = {i: proposed[i] for i in recorded}
        raced = [i for i in ids if i not in recorded]
        if raced:
            decisions |= {r["id"]: bool(r["fanned_out"]) for r in conn.execute(q.READ_DECISIONS, {"post_ids": raced})}
        return decisions

    def _posts_deleted(self, conn: Conn, events: list[ev.Event], done: dict[ev.Event, Applied]) -> None:
        if events:
            probing_by_key(conn, q.DELETE_POSTS, {"post_ids": sorted({e.payload["post_id"] for e in events})})
            done.update({e: "removed" for e in events})

    def _follows_created(self, conn: Conn, events: list[ev.Event], done: dict[ev.Event, Applied]) -> None:
        """Backfill the follows that exist now, raise floors where older posts exist, trim, mark all processed."""
        if not events:
            return
        followers, followees = _pairs(events)
        floors: dict[int, int] = {}
        existing = set()
        for r in conn.execute(q.BACKFILL, {"followers": followers, "followees": followees, "limit": BACKFILL_LIMIT}):
            existing.add((r["follower_id"], r["followee_id"]))
            floor = policy.backfill_floor(r["found"], r["smallest"], BACKFILL_LIMIT)
            if floor is not None:
                floors[r["follower_id"]] = max(floor, floors.get(r["follower_id"], floor))
        if floors:
            users = sorted(floors)
            conn.execute(q.RAISE_FLOORS, {"user_ids": users, "floors": [floors[u] for u in users]})
        trim(conn, sorted({f for f, _ in existing}), self._cap)
        _mark(conn, [e.id for e in events])
        done.update({e: "backfilled" if _pair(e) in existing else "gone" for e in events})

    def _follows_deleted(self, conn: Conn, events: list[ev.Event], done: dict[ev.Event, Applied]) -> None:
        if not events:
            return
        followers, followees = _pairs(events)
        removed = {(r["user_id"], r["author_id"]) for r in probing_by_key(
            conn, q.UNFOLLOW, {"followers": followers, "followees": followees})}
        done.update({e: "removed" if _pair(e) in removed else "kept" for e in events})

    def fan_out_large(self, event: ev.Event) -> str:
        """The audience of a pushed post larger than a chunk (its decision and own row are recorded by `apply`), in
        chunks of followers, one short transaction each under the author's shared lock. Marked processed with the
        last chunk; stopping between chunks raises Interrupted and the redelivery resumes idempotently."""
        with self._pool.connection() as conn:
            return self._fan_out_chunks(conn, event)

    def _fan_out_chunks(self, conn: Conn, event: ev.Event) -> str:
        post_id, author_id = event.payload["post_id"], event.payload["author_id"]
        after = 0
        while True:
            with conn.transaction():
                conn.execute(q.LOCK_AUTHOR_SHARED, {"author_id": author_id})
                args = {"author_id": author_id, "post_id": post_id, "after": after, "limit": self._chunk}
                chunk = conn.execute(q.FANOUT_CHUNK, args).fetchone()
                assert chunk is not None
                finished = not chunk["alive"] or chunk["n"] < self._chunk
                if finished:
                    _mark(conn, [event.id])
            if chunk["n"] and policy.should_trim(post_id):
                self._trim(conn, q.CHUNK_FOLLOWERS, {"author_id": author_id, "after": after, "last": chunk["last"]})
            if finished:
                return decide.PUSHED if chunk["alive"] else decide.DELETED
            after = chunk["last"]
            if self._should_stop():
                raise Interrupted(f"stopping after follower {after}")

    def _trim(self, conn: Conn, users: SQL, args: dict[str, Any]) -> None:
        """Best effort, after the fan-out committed: trim the users `users` selects (its `follower_id` column). A
        failed trim leaves timelines a little over the cap until the next one (docs/adr/0023)."""
        try:
            with conn.transaction():
                trim(conn, [r["follower_id"] for r in conn.execute(users, args)], self._cap)
        except psycopg.Error as exc:  # a failed trim must not fail the committed fan-out
            log.warning("timeline trim skipped", extra={"error": repr(exc)})


def trim(conn: Conn, user_ids: list[int], cap: int) -> int:
    """Keep each user's newest `cap` rows; raise the floor where rows went. Returns how many users were trimmed."""
    if not user_ids:
        return 0
    return len(probing_by_key(conn, q.TRIM, {"user_ids": sorted(user_ids), "keep": cap}))


def probing_by_key(conn: Conn, statement: SQL, args: dict[str, Any]) -> list[Any]:
    """Run a batch's delete from timelines with nested-loop joins only, inside the caller's transaction: each user's
    rows are probed in that user's partition, each post's by index in every partition (sql.py PROBE_BY_KEY,
    docs/adr/0093). Returns its rows, if it returns any. On an error the transaction fails, its settings with it.
    The three statements go in one pipeline: one round trip, not three."""
    with conn.pipeline():
        conn.execute(q.PROBE_BY_KEY)
        cursor = conn.execute(statement, args)
        conn.execute(q.END_PROBES)
    return cursor.fetchall() if cursor.description is not None else []


def _pair(event: ev.Event) -> tuple[int, int]:
    return event.payload["follower_id"], event.payload["followee_id"]


def _pairs(events: list[ev.Event]) -> tuple[list[int], list[int]]:
    """The distinct (follower, followee) pairs of follow events, sorted, as two arrays for unnest."""
    pairs = sorted({_pair(e) for e in events})
    return [f for f, _ in pairs], [e for _, e in pairs]


def _mark(conn: Conn, event_ids: list[uuid.UUID]) -> None:
    mark_processed(conn, CONSUMER, event_ids)
