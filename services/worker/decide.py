"""The fan-out's pure decisions about one batch of events: which events are real and new, which advisory locks a
batch takes, and what to do with each post. No I/O: fanout.py reads the rows these take and runs the statements.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from services.core import events as ev
from services.worker import policy

# An event whose outbox row a worker cannot see is either ahead of its transaction's visibility (a moment, see
# docs/adr/0022) or forged. Tries before it is dead-lettered as forged: with the retry delays of policy.RetryPolicy
# (full jitter from 0.5 s up) three retries span about 1.75 s on average, thousands of times the visibility lag.
NOT_IN_OUTBOX_ATTEMPTS: Final = 4

# Event types whose handler takes the author's advisory lock exclusively (they add or remove an author's rows
# because of a state change); post.created shares it (docs/adr/0022).
_EXCLUSIVE: Final = frozenset({ev.POST_DELETED, ev.FOLLOW_CREATED, ev.FOLLOW_DELETED})


class NotVisibleYet(policy.Expected):
    """The event's outbox row is not visible to this worker: its transaction is not visible yet, or the event was
    never written by walfeed. Retried a few times, then dead-lettered as forged."""

    attempts = NOT_IN_OUTBOX_ATTEMPTS

    def __init__(self, event: ev.Event) -> None:
        super().__init__(f"not in outbox: {event.type} {event.id} has no visible outbox row")


class Forged(policy.Poison):
    """The event's outbox row exists with another type or payload: the message was not published by the relay."""

    def __init__(self, event: ev.Event) -> None:
        super().__init__(f"not in outbox: {event.type} {event.id} differs from its outbox row")


class PostMissing(policy.Expected):
    """post.created names a post that does not exist, or whose author differs: the data is inconsistent."""


@dataclass(frozen=True, slots=True)
class Known:
    """What the database holds for one event id: its outbox row (None: none visible) and whether it was processed."""

    type: str | None
    payload: Mapping[str, Any] | None
    processed: bool


def check(event: ev.Event, known: Known | None) -> policy.Expected | policy.Poison | None:
    """None if the event is real (its outbox row says the same); else the failure to report for it."""
    if known is None or known.type is None or known.payload is None:
        return NotVisibleYet(event)
    if known.type != event.type or any(known.payload.get(k) != v for k, v in event.payload.items()):
        return Forged(event)
    return None


def lock_author(event: ev.Event) -> int:
    """The advisory lock key of an event: the author whose posts it adds or removes."""
    payload = event.payload
    return payload["author_id"] if event.type in (ev.POST_CREATED, ev.POST_DELETED) else payload["followee_id"]


def locks(events: Iterable[ev.Event]) -> tuple[list[int], list[bool]]:
    """Keys in ascending order with their mode (True = exclusive): every batch takes its locks in one global order,
    so two batches cannot deadlock on them. An author locked both ways in one batch is locked exclusively."""
    exclusive: dict[int, bool] = {}
    for event in events:
        key = lock_author(event)
        exclusive[key] = exclusive.get(key, False) or event.type in _EXCLUSIVE
    keys = sorted(exclusive)
    return keys, [exclusive[k] for k in keys]


@dataclass(frozen=True, slots=True)
class PostRow:
    author_id: int
    deleted: bool
    fanned_out: bool | None  # the recorded push/pull decision, None while undecided
    follower_count: int


# What a batch does with a post.created whose event is real and new.
DELETED: Final = "deleted"  # the post is gone: nothing to fan out
PULLED: Final = "pulled"  # a celebrity's post: merged at read time
PUSHED: Final = "pushed"  # fanned out inside the batch's transaction
LARGE: Final = "large"  # pushed, but its audience is fanned out in chunks outside the batch


def post_action(event: ev.Event, row: PostRow | None, push: bool | None, batch_audience: int) -> str:
    """DELETED, PULLED, PUSHED or LARGE for a real post.created (PostMissing if the data is inconsistent), given
    its row, the recorded decision (or the one to record), and the largest audience a batch fans out itself."""
    post_id, author_id = event.payload["post_id"], event.payload["author_id"]
    if row is None:
        raise PostMissing(f"post {post_id} does not exist")
    if row.author_id != author_id:
        raise PostMissing(f"post {post_id} has author {row.author_id}, the event says {author_id}")
    if row.deleted:
        return DELETED
    if not push:
        return PULLED
    return PUSHED if row.follower_count <= batch_audience else LARGE


def distinct(events: Iterable[ev.Event]) -> list[ev.Event]:
    """Each event once: a message delivered twice in one batch is applied once. Events are told apart by all they
    say, not by id: a forgery that reuses a real event's id must not take the real event's outcome."""
    return list(dict.fromkeys(events))
