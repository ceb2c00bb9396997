"""The database effects of the notifier. Adapter: psycopg 3 + the SQL in sql.py; the decisions are mentions.py's
and, for whether an event is real and new, the runtime's (services/consumer/outbox.py), as the fan-out worker's.

`Effects.apply` applies a batch of events in one transaction: the post locks, one lookup of the events' outbox rows
and processed records, then per type: follow.created notifies the followee; post.created notifies the users its
body mentions (unless the post is deleted already); post.deleted withdraws the post's mentions; follow.deleted
changes nothing (an unfollow takes back no notification). Each notification comes with its deliveries and their
`delivery.*` outbox events, in the same transaction (sql.NOTIFY). Every real event is recorded processed.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from psycopg_pool import ConnectionPool

from services.consumer import outbox
from services.consumer.outbox_db import Conn, apply_batch, mark_processed, real_and_new
from services.consumer.outcomes import Expected, Poison
from services.core import events as ev
from services.notifier import mentions
from services.notifier import sql as q
from services.notifier.config import AuthorBudget

log = logging.getLogger(__name__)

CONSUMER: Final = "notifier"  # processed_events.consumer of this process

Applied = str | Expected | Poison  # per event: what was done, or why it was not

# What the notifier did with an event (the consumer's labels).
NOTIFIED: Final = "notified"
NOTHING: Final = "nothing"  # a real event that notifies no one (no mention, a deleted post, an unfollow)
WITHDRAWN: Final = "withdrawn"


@dataclass(frozen=True, slots=True)
class Notification:
    recipient_id: int
    kind: str
    actor_id: int
    post_id: int | None
    event: ev.Event


def post_lock_keys(events: Iterable[ev.Event]) -> list[int]:
    """The advisory keys of the posts a batch creates or deletes, ascending (sql.LOCK_POSTS)."""
    return sorted({-e.payload["post_id"] for e in events if e.type in (ev.POST_CREATED, ev.POST_DELETED)})


class Effects:
    def __init__(self, pool: ConnectionPool, author: AuthorBudget | None = None) -> None:
        self._pool = pool
        self._author = author or AuthorBudget(0, 3600.0)

    def apply(self, events: Iterable[ev.Event]) -> dict[ev.Event, Applied]:
        """Apply a batch in one transaction. Per event: a label of what was done, or the failure of that event
        alone. Raises if the transaction fails: nothing of the batch was applied."""
        return apply_batch(self._pool, events, self._apply)

    def _apply(self, conn: Conn, unique: list[ev.Event]) -> dict[ev.Event, Applied]:
        done: dict[ev.Event, Applied] = {}
        with conn.transaction():
            keys = post_lock_keys(unique)
            if keys:
                conn.execute(q.LOCK_POSTS, {"keys": keys})
            real = real_and_new(conn, CONSUMER, unique, done)
            created = [e for e in real if e.type == ev.POST_CREATED]
            wanted = [*self._follow_notifications(real), *self._mention_notifications(conn, created, done)]
            notified = self._notify(conn, wanted, self._author)
            deleted = [e for e in real if e.type == ev.POST_DELETED]
            if deleted:
                post_ids = sorted({e.payload["post_id"] for e in deleted})
                conn.execute(q.WITHDRAW_MENTIONS, {"post_ids": post_ids})
                conn.execute(q.WITHDRAW_DELIVERIES, {"post_ids": post_ids})
            for event in real:
                if event not in done:
                    done[event] = (WITHDRAWN if event.type == ev.POST_DELETED
                                   else NOTIFIED if event.id in notified else NOTHING)
            mark_processed(conn, CONSUMER, [e.id for e in real if not isinstance(done[e], Exception)])
        return done

    @staticmethod
    def _follow_notifications(events: list[ev.Event]) -> list[Notification]:
        return [Notification(e.payload["followee_id"], "follow", e.payload["follower_id"], None, e)
                for e in events if e.type == ev.FOLLOW_CREATED]

    @staticmethod
    def _mention_notifications(conn: Conn, events: list[ev.Event],
                               done: dict[ev.Event, Applied]) -> list[Notification]:
        """The mentions of live posts; a post that does not exist (or has another author) fails its event."""
        if not events:
            return []
        posts = {r["id"]: r for r in conn.execute(q.POSTS, {"post_ids": [e.payload["post_id"] for e in events]})}
        named: dict[ev.Event, list[str]] = {}
        for event in events:
            post = posts.get(event.payload["post_id"])
            if post is None or post["author_id"] != event.payload["author_id"]:
                done[event] = outbox.PostMissing(
                    f"post {event.payload['post_id']} of author {event.payload['author_id']} does not exist")
            elif not post["deleted"]:
                named[event] = mentions.handles(post["body"])
        wanted = sorted({h for hs in named.values() for h in hs})
        users = {r["handle"]: r["id"] for r in conn.execute(q.USERS_BY_HANDLE, {"handles": wanted})} if wanted else {}
        return [Notification(recipient, "mention", event.payload["author_id"], event.payload["post_id"], event)
                for event, hs in named.items()
                for recipient in mentions.recipients(hs, users, event.payload["author_id"])]

    @staticmethod
    def _notify(conn: Conn, wanted: list[Notification], author: AuthorBudget) -> set[uuid.UUID]:
        """Insert the notifications with their deliveries, within each author's budget; the ids of the events that
        created any."""
        if not wanted:
            return set()
        rows = conn.execute(q.NOTIFY, {
            "recipients": [n.recipient_id for n in wanted], "kinds": [n.kind for n in wanted],
            "actors": [n.actor_id for n in wanted], "posts": [n.post_id for n in wanted],
            "events": [n.event.id for n in wanted],
            "limit": author.deliveries or None, "window": author.window}).fetchall()
        withheld: dict[int, int] = {}
        for r in rows:
            if r["targets"] > r["deliveries"]:
                withheld[r["actor_id"]] = withheld.get(r["actor_id"], 0) + r["targets"] - r["deliveries"]
        for actor, count in withheld.items():
            log.warning("author over its delivery budget: notified in-app only",
                        extra={"actor_id": actor, "withheld": count, "budget": author.deliveries})
        log.debug("notifications created", extra={"notifications": len(rows),
                                                  "deliveries": sum(r["deliveries"] for r in rows)})
        return {r["event_id"] for r in rows}
