"""The fan-out's pure decisions about one batch of events (whether each is real and new is services/consumer/
outbox.py's, as for every consumer of the events exchange): which advisory locks a batch takes, and what to do with
each post. No I/O: fanout.py reads the rows these take and runs the statements.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from services.consumer import outbox
from services.consumer.outcomes import LARGE_LABEL
from services.core import events as ev

# Event types whose handler takes the author's advisory lock exclusively (they add or remove an author's rows
# because of a state change); post.created shares it (docs/adr/0022).
_EXCLUSIVE: Final = frozenset({ev.POST_DELETED, ev.FOLLOW_CREATED, ev.FOLLOW_DELETED})


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
LARGE: Final = LARGE_LABEL  # pushed, but its audience is fanned out in chunks outside the batch
DECIDED: Final = frozenset({PULLED, PUSHED, LARGE})  # the post's decision is recorded: it gets its author's row


def post_action(event: ev.Event, row: PostRow | None, push: bool | None, batch_audience: int) -> str:
    """DELETED, PULLED, PUSHED or LARGE for a real post.created (outbox.PostMissing if the data is inconsistent),
    given its row, the recorded decision (or the one to record), and the largest audience a batch fans out itself."""
    post_id, author_id = event.payload["post_id"], event.payload["author_id"]
    if row is None:
        raise outbox.PostMissing(f"post {post_id} does not exist")
    if row.author_id != author_id:
        raise outbox.PostMissing(f"post {post_id} has author {row.author_id}, the event says {author_id}")
    if row.deleted:
        return DELETED
    if not push:
        return PULLED
    return PUSHED if row.follower_count <= batch_audience else LARGE
