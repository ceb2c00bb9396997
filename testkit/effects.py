"""An in-memory stand-in for the fan-out's effects (services/worker/fanout.py Effects), for unit tests of the
runtime and of the worker on testkit/broker.py's stand-ins."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping

from services.consumer.outcomes import Interrupted, Unavailable
from services.core.events import Event
from services.worker import decide


class FakeEffects:
    """fanout.Effects without a database. `failing[event id]` fails every batch holding that event, as a SQL error
    fails its transaction, and the event alone that many times (None: always); a post id in `large_posts` is
    decide.LARGE. `calls` holds the ids of every batch tried, `commits` of every batch committed; `on_commit` runs
    just before a commit, `should_stop` before a large fan-out."""

    def __init__(self, *, large_posts: Iterable[int] = (), on_commit: Callable[[list[Event]], None] | None = None,
                 should_stop: Callable[[], bool] = lambda: False) -> None:
        self.failing: dict[uuid.UUID, int | None] = {}
        self.large_posts = set(large_posts)
        self.on_commit = on_commit
        self.should_stop = should_stop
        self.unavailable = False
        self.calls: list[list[uuid.UUID]] = []
        self.commits: list[list[uuid.UUID]] = []
        self.fanned_out: list[uuid.UUID] = []

    def apply(self, events: list[Event]) -> Mapping[Event, str | Exception]:
        self.calls.append([e.id for e in events])
        if self.unavailable:
            raise Unavailable("OperationalError: server closed the connection unexpectedly")
        for event in events:
            if event.id not in self.failing:
                continue
            left = self.failing[event.id]
            if left is not None and len(events) == 1:  # only a try of its own counts down
                if left > 1:
                    self.failing[event.id] = left - 1
                else:
                    del self.failing[event.id]
            raise ValueError(f"bigint out of range: {event.id}")
        if self.on_commit is not None:
            self.on_commit(events)
        self.commits.append([e.id for e in events])
        return {e: decide.LARGE if e.payload.get("post_id") in self.large_posts else decide.PUSHED for e in events}

    def fan_out_large(self, event: Event) -> str:
        if self.should_stop():
            raise Interrupted()
        self.fanned_out.append(event.id)
        return decide.PUSHED
