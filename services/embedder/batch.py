"""What one batch of events asks of the embedder, decided without I/O: the posts to embed and those to tombstone.
A post created and deleted within the batch is only tombstoned; an id twice is once."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from services.core.events import POST_CREATED, POST_DELETED, Event


@dataclass(frozen=True, slots=True)
class Work:
    embed: list[int]
    tombstone: list[int]


def plan(events: Sequence[Event]) -> Work:
    deleted = sorted({e.payload["post_id"] for e in events if e.type == POST_DELETED})
    gone = set(deleted)
    created = sorted({e.payload["post_id"] for e in events if e.type == POST_CREATED} - gone)
    return Work(created, deleted)
