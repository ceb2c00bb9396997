"""What the publisher holds and what becomes of each message. Pure: fed with the time and what the broker said.

A message is in one place at a time: ready (submitted, or failed and due again), unconfirmed (published: the
`ConfirmBook`), or retrying (returned, nacked or unconfirmed on a lost channel, waiting out its backoff). At most
`window` are unconfirmed. Failed messages are published again forever (docs/adr/0012), oldest first after a lost
channel: duplicates, never losses. A message `is_current` no longer accepts is not published again
(docs/adr/0015): `drop_stale` forgets those waiting, and those unconfirmed are forgotten when they fail.

After a nack the publisher probes (`probing`): nothing more is published until a single message, the probe, is
acked; the first probe goes RETRY_BASE after the nack, each nacked probe doubles the wait up to RETRY_CAP, and an
ack opens the whole window again. An event is routed to several queues and a publish nacked because one of them
refused it (a quorum queue electing its leader) leaves a copy in the others: publishing on through an election put
one copy per event read and per retry in every other queue (~1,600 for a 10 s election in
tests/e2e/test_rabbit_cluster.py); probing puts one per probe (docs/adr/0090).

The usual message never fails: its first publish time travels with it in the book, and neither of the two dicts
kept by message id for failed ones (failed tries until confirmed, first publish time until published again) is
touched. `publisher.Publisher` is the pika side (sockets, timers, metrics); this is the sequin split of a process
from its state (STYLE.md).
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

from services.cdc_relay.confirms import ConfirmBook
from services.cdc_relay.messages import SINGLE, Outgoing
from services.core import backoff

T = TypeVar("T")

RETRY_BASE = 0.2  # seconds before a failed message's first retry, doubling up to RETRY_CAP
RETRY_CAP = 5.0


Entry = tuple[Outgoing[T], float]  # a message and when it was first published


@dataclass(slots=True)
class Settled(Generic[T]):
    """What an ack or nack frame settled: the confirmed messages' tokens and first publish times, and the failed
    messages, for `retry`; `confirmed`: the confirmed messages themselves (for their send spans); `events`: how many
    events the confirmed messages carry (more than the messages when some are groups)."""

    tokens: list[T]
    first_sent: list[float]
    failed: list[Entry[T]]
    confirmed: list[Entry[T]]
    events: int


def always_current(_token: object) -> bool:
    return True


class PublisherState(Generic[T]):
    def __init__(self, window: int, is_current: Callable[[T], bool] = always_current) -> None:
        self._window = window
        self._is_current = is_current
        self._ready: deque[Outgoing[T]] = deque()
        self._retry: list[tuple[float, int, Outgoing[T]]] = []  # a heap by due time, then failure order
        self._order = itertools.count()
        self._book: ConfirmBook[Entry[T]] = ConfirmBook()
        self._tries: dict[str, int] = {}
        self._first_sent: dict[str, float] = {}
        self._probes = 0  # probes nacked since the last ack, plus the first nack: 0 when not probing
        self._probe_at: float | None = None  # when the next probe may go; None once `due` found it past
        self._probe_sent = False  # the probe is the one message in flight

    @property
    def unconfirmed(self) -> int:
        """Messages published and not confirmed yet (at most the window)."""
        return len(self._book)

    @property
    def ready(self) -> int:
        return len(self._ready)

    @property
    def retrying(self) -> int:
        return len(self._retry)

    @property
    def waiting(self) -> int:
        """Messages held to be published: ready, or failed and waiting for their retry."""
        return len(self._ready) + len(self._retry)

    @property
    def probing(self) -> bool:
        return self._probes > 0

    @property
    def next_due(self) -> float | None:
        """When `due` has something to do: the first retrying message due, or the next probe allowed; None when
        neither waits."""
        times = ([self._retry[0][0]] if self._retry else []) + ([self._probe_at] if self._probe_at is not None else [])
        return min(times) if times else None

    def submit(self, messages: Iterable[Outgoing[T]]) -> None:
        self._ready.extend(messages)

    def to_publish(self, now: float) -> list[Outgoing[T]]:
        """The ready messages that fit in the window, oldest first, booked as published at `now` in this order (the
        broker numbers them in the order they are published)."""
        ready = self._ready
        if self._probes:
            if self._probe_at is not None or self._probe_sent or not ready or len(self._book):
                return []
            self._probe_sent = True
            count = 1
        else:
            count = min(len(ready), self._window - len(self._book))
        if count <= 0:
            return []
        popleft = ready.popleft
        batch = [popleft() for _ in range(count)]
        if self._first_sent:  # some of them failed before: they keep their first publish time
            pop = self._first_sent.pop
            self._book.sent_many([(key(m), (m, pop(key(m), now))) for m in batch])
        else:
            self._book.sent_many([(m.message_id if m.route != SINGLE else _SINGLE + m.message_id, (m, now))
                                  for m in batch])
        return batch

    def returned(self, message_id: str) -> None:
        """The broker returned the message `message_id`: a mandatory one (never a SINGLE copy, not mandatory)."""
        self._book.returned(message_id)

    def acked(self, tag: int, multiple: bool) -> Settled[T]:
        outcome = self._book.acked(tag, multiple)
        self._stop_probing()  # the broker takes publishes again
        return self._settled(outcome.confirmed, outcome.failed)

    def nacked(self, tag: int, multiple: bool, now: float) -> Settled[T]:
        failed = self._book.nacked(tag, multiple).failed
        if failed and (not self._probes or self._probe_sent):  # the first nack, or the probe's
            self._probes += 1
            self._probe_sent = False
            self._probe_at = now + min(RETRY_CAP, RETRY_BASE * 2 ** (self._probes - 1))
        return Settled([], [], failed, [], 0)

    def retry(self, failed: list[Entry[T]], now: float) -> int:
        """Failed messages wait out their backoff (`next_due`, `due`); stale ones are forgotten. Returns how many
        events (a group counts all of its) will be published again."""
        again = self._keep(failed)
        tries, retry, order = self._tries, self._retry, self._order
        for message in again:
            count = tries[key(message)] = tries.get(key(message), 0) + 1
            heapq.heappush(retry, (now + backoff.delay(count, RETRY_BASE, RETRY_CAP), next(order), message))
        return _events(again, singles=True)

    def due(self, now: float) -> None:
        """Retrying messages whose backoff is over become ready, and a probe may go once its wait is over."""
        if self._probe_at is not None and self._probe_at <= now:
            self._probe_at = None
        retry = self._retry
        while retry and retry[0][0] <= now:
            self._ready.append(heapq.heappop(retry)[2])

    def channel_lost(self) -> int:
        """Nothing is in flight on a closed channel: everything unconfirmed goes first in the ready queue, oldest
        first, to be published again (the broker may or may not have it: resending is the at-least-once answer).
        Returns how many events (a group counts all of its) will be published again."""
        again = self._keep(self._book.reset())
        self._ready.extendleft(reversed(again))
        self._stop_probing()  # a new channel starts with the whole window
        return _events(again, singles=True)

    def drop_stale(self) -> None:
        """Forget the waiting messages `is_current` no longer accepts. Unconfirmed ones are forgotten if they fail:
        stale messages are checked here and on failure, never per publish."""
        is_current = self._is_current
        stale = [m for m in self._ready if not is_current(m.token)]
        stale += [entry[2] for entry in self._retry if not is_current(entry[2].token)]
        if not stale:
            return
        self._ready = deque(m for m in self._ready if is_current(m.token))
        self._retry = [entry for entry in self._retry if is_current(entry[2].token)]
        heapq.heapify(self._retry)
        for message in stale:
            self._forget(message)

    def _stop_probing(self) -> None:
        self._probes, self._probe_at, self._probe_sent = 0, None, False

    def _settled(self, confirmed: list[Entry[T]], failed: list[Entry[T]]) -> Settled[T]:
        if self._tries:
            for message, _ in confirmed:
                self._tries.pop(key(message), None)
        return Settled([m.token for m, _ in confirmed], [at for _, at in confirmed], failed, confirmed,
                       _events(m for m, _ in confirmed))

    def _keep(self, entries: list[Entry[T]]) -> list[Outgoing[T]]:
        """The messages to publish again, their first publish time kept; stale ones forgotten."""
        is_current, first_sent, again = self._is_current, self._first_sent, []
        for message, at in entries:
            if is_current(message.token):
                first_sent.setdefault(key(message), at)
                again.append(message)
            else:
                self._forget(message)
        return again

    def _forget(self, message: Outgoing[T]) -> None:
        self._tries.pop(key(message), None)
        self._first_sent.pop(key(message), None)


_SINGLE = "single:"  # before a SINGLE copy's key: its event's walfeed copy has the same message id (routes.py)


def key(message: Outgoing[object]) -> str:
    """The message's key in the book and the dicts: its id, which a return names; a fan-out event's SINGLE copy,
    never returned (not mandatory), apart from its walfeed copy of the same id."""
    return message.message_id if message.route != SINGLE else _SINGLE + message.message_id


def _events(messages: Iterable[Outgoing[T]], singles: bool = False) -> int:
    """How many events `messages` carry: one each, all of its own for a group's (docs/adr/0095); a fan-out event's
    SINGLE copy counted only with `singles` (docs/adr/0115: published, an event counts once; published again, each
    copy is a duplicate for its consumers)."""
    return sum(1 if m.traceparents is None else len(m.traceparents) for m in messages
               if singles or m.route != SINGLE)
