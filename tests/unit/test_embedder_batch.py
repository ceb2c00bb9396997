"""The embedder's plan of a batch (services/embedder/batch.py)."""

from services.core.events import POST_CREATED, POST_DELETED, Event
from services.embedder.batch import Work, plan


def _event(kind: str, post: int) -> Event:
    return Event.new(kind, post, {"post_id": post, "author_id": 1})


def test_created_posts_are_embedded_once_and_deleted_ones_only_tombstoned() -> None:
    events = [_event(POST_CREATED, 3), _event(POST_CREATED, 1), _event(POST_CREATED, 3), _event(POST_CREATED, 2),
              _event(POST_DELETED, 2), _event(POST_DELETED, 9)]
    assert plan(events) == Work(embed=[1, 3], tombstone=[2, 9])
    assert plan([]) == Work([], [])
