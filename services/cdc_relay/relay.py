"""The relay: replication stream -> publisher, positions confirmed behind the broker's confirms. One thread.

A pika IOLoop watches the replication socket and the broker's socket and runs the timers (docs/adr/0014): the
stream is read when it is readable and the read-ahead allows (at most READ_AHEAD windows of events unconfirmed),
events go straight to the publisher (which keeps one window of messages at the broker): each alone to the events
exchange, and a fan-out event also to the grouped exchange for walfeed's consumers, grouped with the events of its type
read with it up to WALFEED_RELAY_GROUP_MAX (routes.py, grouping.py, docs/adr/0115, 0095); confirmations come back
as calls on the same thread. Nothing here blocks on the broker: status updates go out
from a timer whatever the broker does (slow, blocked by an alarm, down), well inside wal_sender_timeout.

The relay is handed its loop, a way to open the stream and a way to build the publisher (main.py builds the real
ones; testing.py has in-memory ones for unit tests).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol, cast

from pika.adapters.select_connection import IOLoop

from services.cdc_relay import metrics, routes, sessions
from services.cdc_relay.config import RelaySettings
from services.cdc_relay.messages import Outgoing
from services.cdc_relay.positions import PositionTracker
from services.cdc_relay.sessions import Sessions, Token
from services.cdc_relay.stream import Interrupted, ReplicationError, SlotBusy, SlotMissing
from services.cdc_relay.wal2json import Begin, Commit, Insert, format_lsn, parse
from services.core import backoff, sdnotify

log = logging.getLogger(__name__)

READ_BATCH = 500  # messages read before the loop looks at its sockets and timers again
READ_AHEAD = 2  # events held (read, not confirmed), at most, in windows
TICK = 0.1  # seconds between two looks at the position to confirm


class Stream(Protocol):
    """A replication session (stream.ReplicationStream): raises ReplicationError when it is over."""

    start_lsn: int

    def read_message(self) -> Any: ...  # the next message (its `payload` is bytes), or None: non-blocking

    def fileno(self) -> int: ...

    @property
    def wal_end(self) -> int: ...

    def feedback(self, lsn: int) -> None: ...

    def close(self) -> None: ...


class EventPublisher(Protocol):
    """What the relay asks of the publisher (publisher.Publisher[Token]), on the relay's loop."""

    def start(self) -> None: ...

    def submit(self, messages: Iterable[Outgoing[Token]]) -> None: ...

    def drop_stale(self) -> None: ...

    def stop(self, on_stopped: Callable[[], None]) -> None: ...


OpenStream = Callable[[], Stream]  # raises SlotMissing, SlotBusy, Interrupted or ReplicationError
# Builds the publisher with the relay's confirmation callback and its test of a current token.
MakePublisher = Callable[[Callable[[list[Token]], None], Callable[[Token], bool]], EventPublisher]


class Relay:
    def __init__(self, relay: RelaySettings, slot: str, ioloop: IOLoop, open_stream: OpenStream,
                 make_publisher: MakePublisher, clock: Callable[[], float] = time.monotonic) -> None:
        self._cfg, self._slot, self._ioloop, self._open, self._clock = relay, slot, ioloop, open_stream, clock
        self._sessions = Sessions()  # which tokens are stale: those of a replication session that ended
        self._publisher = make_publisher(self._on_confirmed, self._sessions.is_current)
        # The broker keeps one window; the stream is read up to one more ahead of it, so the broker's window is
        # refilled from memory, never waits for the stream. Events held stay bounded by READ_AHEAD windows. The
        # tracker counts messages' numbers, up to routes.COPIES_MAX an event: the limit is in those.
        self._limit = READ_AHEAD * relay.window * routes.COPIES_MAX
        self._group_max = relay.group_max
        # Read again once a quarter window is confirmed.
        self._resume_at = self._limit - max(1, relay.window * routes.COPIES_MAX // 4)
        self._stream: Stream | None = None
        self._tracker: PositionTracker | None = None
        self._fd = -1
        self._watching = False  # the replication socket is in the loop
        self._read_soon = False  # a read is scheduled (libpq may hold messages the socket does not signal)
        self._attempt = 0  # failed attempts to open the stream in a row
        self._sent = 0  # the position last confirmed to Postgres
        self._last_feedback = 0.0
        self._stopping = False
        self._stop_deadline = 0.0
        self._stopped = False
        self._exit = 0

    def run(self) -> int:
        """Runs the loop until stopped (`request_stop`, or a missing slot); returns the exit status."""
        self.start()
        try:
            self._ioloop.start()
        finally:
            self._close_stream()
            self._ioloop.close()
        return self._exit

    def start(self) -> None:
        """Schedules the first steps on the loop; `run` then runs it."""
        self._publisher.start()
        self._ioloop.call_later(0, self._open_stream)
        self._ioloop.call_later(TICK, self._tick)

    @property
    def exit_status(self) -> int:
        return self._exit

    def request_stop(self) -> None:
        """Stop, from any thread or a signal handler: wakes the loop; the rest happens on it."""
        self._ioloop.add_callback_threadsafe(self._begin_stop)

    # --- the replication stream ---
    def _open_stream(self) -> None:
        if self._stopping:
            return
        try:
            stream = self._open()
        except SlotMissing:
            log.error("replication slot does not exist: check WALFEED_SLOT and run `walfeed migrate`",
                      extra={"slot": self._slot})
            self._exit = 1
            self._begin_stop()
            return
        except Interrupted:
            return  # the stop request is on the loop already
        except SlotBusy as exc:
            log.info("standby: the slot is streamed by another relay", extra={"detail": str(exc)})
            sdnotify.ready("standby: the slot is streamed by another relay")
            self._ioloop.call_later(self._cfg.standby_interval, self._open_stream)
            return
        except ReplicationError as exc:
            self._attempt += 1
            wait = backoff.delay(self._attempt, 0.5, 10.0)
            log.warning("postgres unreachable, retrying", extra={"error": str(exc).strip(),
                                                                 "retry_in": round(wait, 2)})
            self._ioloop.call_later(wait, self._open_stream)
            return
        self._attempt = 0
        self._tracker = PositionTracker(stream.start_lsn, self._sessions.first_seq)
        self._stream, self._fd = stream, stream.fileno()
        self._sent, self._last_feedback = stream.start_lsn, self._clock()
        log.info("streaming", extra={"slot": self._slot, "lsn": format_lsn(stream.start_lsn)})
        sdnotify.ready(f"streaming slot {self._slot}")
        self._watch(True)
        self._schedule_read()

    def _watch(self, on: bool) -> None:
        if on == self._watching or self._stream is None:
            return
        if on:
            self._ioloop.add_handler(self._fd, self._on_readable, IOLoop.READ)
        else:
            self._ioloop.remove_handler(self._fd)
        self._watching = on

    def _on_readable(self, _fd: int, _events: int) -> None:
        self._read_available()

    def _schedule_read(self) -> None:
        if not self._read_soon:
            self._read_soon = True
            self._ioloop.call_later(0, self._scheduled_read)

    def _scheduled_read(self) -> None:
        self._read_soon = False
        self._read_available()

    def _read_available(self) -> None:
        stream, tracker = self._stream, self._tracker
        if stream is None or tracker is None or self._stopping:
            return
        room = self._limit - tracker.in_flight
        if room <= 0:
            self._watch(False)  # until confirmations make room (`_on_confirmed`)
            return
        batch: list[Outgoing[int]] = []
        try:
            more = self._read(stream, tracker, batch, room)
        except ReplicationError as exc:
            self._lose_stream(exc)
            return
        if batch:
            self._publisher.submit(routes.relay(batch, self._group_max))
            metrics.IN_FLIGHT.set(tracker.in_flight)
        if tracker.in_flight >= self._limit:
            self._watch(False)
        elif more:
            self._schedule_read()  # after the loop has looked at the broker's socket and the timers

    def _lose_stream(self, exc: BaseException) -> None:
        metrics.RECONNECTS.labels("postgres").inc()
        log.warning("replication connection lost, reconnecting", extra={"error": str(exc).strip()})
        self._close_stream()
        self._ioloop.call_later(backoff.delay(1, 0.5, 10.0), self._open_stream)

    def _close_stream(self) -> None:
        stream = self._stream
        if stream is None:
            return
        # The session ends: its events not yet published are stale from now on (no duplicates in between).
        self._sessions.end()
        self._publisher.drop_stale()
        metrics.IN_FLIGHT.set(0)  # Postgres sends what was in flight again
        if self._watching:
            with contextlib.suppress(Exception):
                self._ioloop.remove_handler(self._fd)
            self._watching = False
        self._stream = self._tracker = None
        stream.close()

    # --- confirmations and positions ---
    def _on_confirmed(self, tokens: list[Token]) -> None:  # from the publisher's ack callback
        tracker = self._tracker
        if tracker is None:
            return  # the session ended: Postgres sends its events again
        # Without grouping every token is one copy's number: the list is used as it is, on the hot path.
        seqs = sessions.seqs(tokens) if self._group_max > 1 else cast(list[int], tokens)
        tracker.confirmed_many(self._sessions.current(seqs))  # a session that ended: not ours to count
        metrics.IN_FLIGHT.set(tracker.in_flight)
        if self._stopping:
            if not tracker.in_flight:
                self._finish_stop()
        elif not self._watching and tracker.in_flight <= self._resume_at:
            self._watch(True)
            self._schedule_read()

    def _tick(self) -> None:
        """Every TICK: the idle position, and a status update when the position advanced or when
        WALFEED_RELAY_STATUS_INTERVAL passed without one. (The in-flight gauge moves where in-flight does: at
        each read and each confirmation.)"""
        if self._stopped:
            return
        self._ioloop.call_later(TICK, self._tick)
        stream, tracker = self._stream, self._tracker
        if stream is None or tracker is None:
            return
        try:
            if tracker.idle:
                tracker.server_idle_at(stream.wal_end)
            now = self._clock()
            if tracker.confirmable > self._sent or now - self._last_feedback >= self._cfg.status_interval:
                self._feedback(stream, tracker, now)
        except ReplicationError as exc:
            self._lose_stream(exc)

    def _feedback(self, stream: Stream, tracker: PositionTracker, now: float) -> None:
        stream.feedback(tracker.confirmable)
        self._sent, self._last_feedback = tracker.confirmable, now
        metrics.CONFIRMED_LSN.set(self._sent)

    # --- stopping ---
    def _begin_stop(self) -> None:
        """Stop reading, wait (bounded) for outstanding confirms, send the final position, close the broker."""
        if self._stopping:
            return
        self._stopping = True
        self._watch(False)
        self._stop_deadline = self._clock() + self._cfg.shutdown_timeout
        in_flight = self._tracker.in_flight if self._tracker is not None else 0
        log.info("stopping: waiting for outstanding confirms", extra={"in_flight": in_flight})
        sdnotify.stopping(f"waiting for {in_flight} outstanding confirms")
        self._wait_for_confirms()

    def _wait_for_confirms(self) -> None:
        tracker = self._tracker
        if tracker is not None and tracker.in_flight and self._clock() < self._stop_deadline:
            self._ioloop.call_later(TICK, self._wait_for_confirms)  # `_on_confirmed` may finish earlier
            return
        self._finish_stop()

    def _finish_stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        stream, tracker = self._stream, self._tracker
        if stream is not None and tracker is not None:
            try:
                self._feedback(stream, tracker, self._clock())
            except ReplicationError as exc:
                log.warning("could not send the final position", extra={"error": str(exc).strip()})
            log.info("stopped", extra={"lsn": format_lsn(tracker.confirmable), "unconfirmed": tracker.in_flight})
        self._close_stream()
        self._publisher.stop(self._ioloop.stop)


    @staticmethod
    def _read(stream: Stream, tracker: PositionTracker, batch: list[Outgoing[int]], room: int) -> bool:
        """Read up to READ_BATCH messages and at most `room` event copies; True when more may be waiting.

        The hot loop of the relay: the tracker hears of the events once per transaction part (at the
        commit, or at the end of the batch), not per event; their sequence numbers are the ones it will give, one
        per message that will carry the event (routes.py: two for a fan-out event, s and s + 1, so that its position
        waits for both).
        """
        read_message, append, copies_of = stream.read_message, batch.append, routes.copies
        seq = tracker.next_seq  # of the next event
        pending = 0  # copies of events of the open transaction not told to the tracker yet
        more = True
        for _ in range(READ_BATCH):
            raw = read_message()
            if raw is None:
                more = False
                break
            message = parse(raw.payload)
            if isinstance(message, Insert):
                append(Outgoing(seq, message.body, message.event_id, message.type, message.timestamp,
                                message.traceparent))
                copies = copies_of(message.type)
                seq += copies
                pending += copies
                room -= copies
                if room <= 0:
                    more = False
                    break
            elif isinstance(message, Begin):
                tracker.begin()
            elif isinstance(message, Commit):
                if pending:
                    tracker.published_many(pending)
                    pending = 0
                tracker.commit(message.next_lsn)
        if pending:
            tracker.published_many(pending)
        return more

