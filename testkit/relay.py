"""In-memory stand-ins for the relay's adapters, for unit tests: what procrastinate's InMemoryConnector and
dramatiq's StubBroker are to theirs. `ManualLoop` is the part of pika's IOLoop the relay uses, on a virtual clock;
`InMemoryStream` is a replication session the test feeds with wal2json messages; `StubPublisher` holds what the
relay submits until the test confirms it. Hand them to `relay.Relay` as main.bootstrap hands it the real ones
(InMemoryStream is a relay.Stream, StubPublisher a relay.EventPublisher).
"""

from __future__ import annotations

import heapq
import itertools
import uuid
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

import orjson
from pika.adapters.select_connection import IOLoop

from services.cdc_relay import wal2json
from services.cdc_relay.messages import Outgoing
from services.cdc_relay.sessions import Token
from services.cdc_relay.stream import SlotBusy, SlotMissing


class ManualLoop:
    """Runs callbacks in virtual time: due timers first, then the handlers of readable descriptors, then the clock
    jumps to the next timer. `run_for` runs a span of virtual time; `start` runs until `stop`."""

    def __init__(self) -> None:
        self.now = 0.0
        self._timers: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()
        self._cancelled: set[int] = set()
        self._handlers: dict[int, Callable[[int, int], None]] = {}
        self._readable: set[int] = set()
        self.stopped = False

    def time(self) -> float:
        return self.now

    def call_later(self, delay: float, callback: Callable[[], None]) -> int:
        handle = next(self._order)
        heapq.heappush(self._timers, (self.now + max(0.0, delay), handle, callback))
        return handle

    def remove_timeout(self, handle: int) -> None:
        self._cancelled.add(handle)

    def add_callback_threadsafe(self, callback: Callable[[], None]) -> None:
        self.call_later(0, callback)

    def add_handler(self, fd: int, handler: Callable[[int, int], None], _events: int) -> None:
        self._handlers[fd] = handler

    def remove_handler(self, fd: int) -> None:
        del self._handlers[fd]

    def watching(self, fd: int) -> bool:
        return fd in self._handlers

    def readable(self, fd: int) -> None:
        """Data arrived on `fd`: its handler runs once (as for a socket, data already buffered is not an event)."""
        self._readable.add(fd)

    def stop(self) -> None:
        self.stopped = True

    def close(self) -> None:
        pass

    def start(self, limit: float = 3600.0) -> None:
        self.run_for(limit)
        if not self.stopped:
            raise RuntimeError(f"the loop did not stop within {limit} virtual seconds")

    def run_for(self, seconds: float) -> None:
        end = self.now + seconds
        while not self.stopped:
            if self._timers and self._timers[0][0] <= self.now:
                _, handle, callback = heapq.heappop(self._timers)
                if handle in self._cancelled:
                    self._cancelled.discard(handle)
                else:
                    callback()
            elif ready := [fd for fd in self._readable if fd in self._handlers]:
                for fd in ready:
                    self._readable.discard(fd)
                    self._handlers[fd](fd, IOLoop.READ)
            elif self._timers and self._timers[0][0] <= end:
                self.now = self._timers[0][0]
            else:
                self.now = end
                return


class Message(NamedTuple):
    payload: bytes


class InMemoryStream:
    """A replication session fed by the test (`send`); `fail` makes its next read raise as a lost connection does."""

    _fds = itertools.count(1000)

    def __init__(self, loop: ManualLoop, start_lsn: int = 0) -> None:
        self._loop = loop
        self.start_lsn = self.wal_end = start_lsn
        self._fd = next(self._fds)
        self._messages: deque[Message] = deque()
        self._error: BaseException | None = None
        self.feedbacks: list[int] = []
        self.closed = False

    def send(self, payloads: Iterable[bytes], wal_end: int | None = None) -> None:
        self._messages.extend(Message(p) for p in payloads)
        if wal_end is not None:
            self.wal_end = wal_end
        self._loop.readable(self._fd)

    def fail(self, error: BaseException) -> None:
        self._error = error
        self._loop.readable(self._fd)

    @property
    def buffered(self) -> int:
        return len(self._messages)

    def read_message(self) -> Message | None:
        if self._error is not None:
            raise self._error
        return self._messages.popleft() if self._messages else None

    def fileno(self) -> int:
        return self._fd

    def feedback(self, lsn: int) -> None:
        if self._error is not None:
            raise self._error
        self.feedbacks.append(lsn)

    def close(self) -> None:
        self.closed = True


class StreamOpener:
    """The relay's `open_stream`: hands out the sessions queued with `then`, or raises what was queued instead."""

    def __init__(self) -> None:
        self._next: deque[InMemoryStream | SlotMissing | SlotBusy | BaseException] = deque()
        self.opened: list[InMemoryStream] = []

    def then(self, outcome: InMemoryStream | BaseException) -> StreamOpener:
        self._next.append(outcome)
        return self

    def __call__(self) -> InMemoryStream:
        if not self._next:
            raise SlotBusy("no session queued by the test")
        outcome = self._next.popleft()
        if isinstance(outcome, BaseException):
            raise outcome
        self.opened.append(outcome)
        return outcome


class StubPublisher:
    """Holds what the relay submits (`held`, oldest first) until the test calls `confirm`. `drop_stale` forgets the
    held messages whose tokens are stale, as the real publisher does with those not in flight."""

    def __init__(self, on_confirmed: Callable[[list[Token]], None], is_current: Callable[[Token], bool]) -> None:
        self.on_confirmed, self._is_current = on_confirmed, is_current
        self.submitted: list[Outgoing[Token]] = []
        self.held: list[Outgoing[Token]] = []
        self.started = self.stopped = False

    def start(self) -> None:
        self.started = True

    def submit(self, messages: Iterable[Outgoing[Token]]) -> None:
        batch = list(messages)
        self.submitted += batch
        self.held += batch

    def drop_stale(self) -> None:
        self.held = [m for m in self.held if self._is_current(m.token)]

    def confirm(self, count: int | None = None) -> None:
        """The broker confirms the `count` oldest held messages (all of them by default), in one ack frame."""
        count = len(self.held) if count is None else count
        done, self.held = self.held[:count], self.held[count:]
        if done:
            self.on_confirmed([m.token for m in done])

    def stop(self, on_stopped: Callable[[], None]) -> None:
        self.stopped = True
        on_stopped()


def transaction(events: int, next_lsn: int, type: str = "post.created") -> list[bytes]:
    """The wal2json messages of a transaction that wrote `events` outbox rows of `type` and ended at `next_lsn`."""
    inserts = [_insert(str(uuid.uuid4()), type) for _ in range(events)]
    end = {"action": "C", "lsn": wal2json.format_lsn(next_lsn - 1), "nextlsn": wal2json.format_lsn(next_lsn)}
    return [b'{"action":"B"}', *inserts, orjson.dumps(end)]


def _insert(event_id: str, type: str) -> bytes:
    aggregate, payload = ("post", '{"post_id": 7}') if type.startswith("post.") else ("delivery", '{"delivery_id": 7}')
    columns: list[dict[str, Any]] = [
        {"name": "id", "value": event_id}, {"name": "aggregatetype", "value": aggregate},
        {"name": "aggregateid", "value": "7"}, {"name": "type", "value": type},
        {"name": "payload", "value": payload}, {"name": "created_at", "value": "2026-11-29 19:29:48+00"},
    ]
    return orjson.dumps({"action": "I", "lsn": "0/1", "schema": "public", "table": "outbox", "columns": columns})
