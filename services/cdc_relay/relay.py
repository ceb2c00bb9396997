"""The relay loop: replication stream -> publisher, positions confirmed behind the broker's confirms.

One thread reads the stream, tracks positions and talks to Postgres; the publisher thread owns the broker
connection (docs/adr/0011). They meet in two places: `Publisher.submit` (bounded: the stream is not read while
READ_AHEAD windows of events are unconfirmed) and the confirmation queue, signalled through a pipe so the
loop's select() wakes for both the replication socket and confirmations.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import select
import signal
import time
from collections.abc import Hashable
from types import FrameType
from typing import cast

from services.cdc_relay import metrics
from services.cdc_relay.config import RelaySettings
from services.cdc_relay.positions import PositionTracker
from services.cdc_relay.publisher import Outgoing, Publisher
from services.cdc_relay.stream import ConnectionLost, ReplicationStream, SlotBusy, SlotMissing
from services.cdc_relay.wal2json import Begin, Commit, Insert, format_lsn, parse
from services.core import backoff
from services.core.events import Event, encode
from services.core.settings import Settings
from services.core.topology import Topology

log = logging.getLogger(__name__)

SESSION_SEQ_BITS = 40  # sequence numbers of session n are n << 40, n << 40 + 1...
READ_BATCH = 500  # messages read before looking at confirmations again
READ_AHEAD = 2  # events held (read, not confirmed), at most, in windows
FEEDBACK_MIN_GAP = 0.1  # seconds between two position updates while busy


class Relay:
    def __init__(self, settings: Settings, relay: RelaySettings) -> None:
        self._settings, self._cfg = settings, relay
        self._stopping = False
        self._asleep = False  # the loop waits in select(): confirmations must poke the pipe to wake it
        self._wake_after = 1  # confirmations the sleeping loop waits for (set by the loop before it sleeps)
        self._unpoked = 0  # confirmations queued since the last poke (publisher thread only)
        self._epoch = 0  # one per replication session; confirmations of older sessions are ignored
        self._first_seq = 0  # the session's sequence numbers (the tokens) start here: older ones are of old sessions
        self._confirmed: queue.SimpleQueue[list[Hashable]] = queue.SimpleQueue()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._publisher = Publisher(settings.amqp_url, Topology(settings.amqp_prefix), self._on_confirmed,
                                    window=relay.window, is_current=lambda token: token >= self._first_seq,  # type: ignore[operator]
                                    blocked_timeout=relay.blocked_timeout)

    def run(self) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)
        attempt = 0
        try:
            while not self._stopping:
                try:
                    stream = ReplicationStream.open(self._settings.database_url, self._settings.slot,
                                                    self._cfg.status_interval)
                except SlotMissing:
                    log.error("replication slot does not exist: check WALFEED_SLOT and run `walfeed migrate`",
                              extra={"slot": self._settings.slot})
                    return 1
                except SlotBusy as exc:
                    log.info("standby: the slot is streamed by another relay", extra={"detail": str(exc)})
                    self._sleep(self._cfg.standby_interval)
                    continue
                except ConnectionLost as exc:
                    attempt += 1
                    wait = backoff.delay(attempt, 0.5, 10.0)
                    log.warning("postgres unreachable, retrying", extra={"error": str(exc).strip(),
                                                                         "retry_in": round(wait, 2)})
                    self._sleep(wait)
                    continue
                attempt = 0
                try:
                    self._session(stream)
                except ConnectionLost as exc:
                    metrics.RECONNECTS.labels("postgres").inc()
                    log.warning("replication connection lost, reconnecting", extra={"error": str(exc).strip()})
                    self._sleep(backoff.delay(1, 0.5, 10.0))
                finally:
                    stream.close()
            return 0
        finally:
            self._publisher.stop()
            if self._publisher.is_alive():
                self._publisher.join(5.0)
            os.close(self._wake_r)
            os.close(self._wake_w)

    def _session(self, stream: ReplicationStream) -> None:
        self._epoch += 1
        # Tokens are the tracker's sequence numbers, made unique across sessions: those below the current
        # session's first one belong to a session that ended (its events are sent again by Postgres).
        self._first_seq = first_seq = self._epoch << SESSION_SEQ_BITS
        tracker = PositionTracker(stream.start_lsn, first_seq)
        # The publisher keeps at most `window` events unconfirmed at the broker; the stream is read up to one more
        # window ahead of it, so that the broker's window is refilled from memory, never waits for this loop.
        # Events held (read, not confirmed) stay bounded by 2 x window whatever the transaction size.
        window = READ_AHEAD * self._cfg.window
        resume_at = window - self._cfg.window // 4  # read again once a quarter window is confirmed
        throttled = False
        if not self._publisher.is_alive():
            self._publisher.start()
        log.info("streaming", extra={"slot": self._settings.slot, "lsn": format_lsn(stream.start_lsn)})
        sent = stream.start_lsn
        last_feedback = time.monotonic()
        while not self._stopping:
            self._drain(tracker, first_seq)
            batch: list[Outgoing] = []
            more = False
            if throttled and tracker.in_flight <= resume_at:
                throttled = False
            if not throttled and tracker.in_flight < window:
                more = self._read(stream, tracker, batch, window - tracker.in_flight)
                if batch:
                    self._publisher.submit(batch)
                throttled = tracker.in_flight >= window
            if tracker.idle:
                tracker.server_idle_at(stream.wal_end)
            metrics.IN_FLIGHT.set(tracker.in_flight)
            now = time.monotonic()
            advanced = tracker.confirmable > sent and now - last_feedback >= FEEDBACK_MIN_GAP
            if advanced or now - last_feedback >= self._cfg.status_interval:
                stream.feedback(tracker.confirmable)
                sent, last_feedback = tracker.confirmable, now
                metrics.CONFIRMED_LSN.set(sent)
            if more:
                continue
            watch: list[int] = [self._wake_r]
            if not throttled and tracker.in_flight < window:
                watch.append(stream.fileno())
            # With most of the window in flight, the loop has little to do before enough confirmations arrive to
            # read a quarter window again: one wake-up for them, not one per ack frame (the stream's socket and the
            # timeout still wake it; a lost or failed confirmation too).
            wake_after = tracker.in_flight - resume_at if tracker.in_flight > resume_at else 1
            self._wait(watch, FEEDBACK_MIN_GAP if tracker.confirmable > sent else min(1.0, self._cfg.status_interval),
                       wake_after)
        self._shutdown(stream, tracker, first_seq)

    @staticmethod
    def _read(stream: ReplicationStream, tracker: PositionTracker, batch: list[Outgoing], room: int) -> bool:
        """Read up to READ_BATCH messages and at most `room` events; True when more may be waiting.

        The hot loop of the stream thread: the tracker hears of the events once per transaction part (at the
        commit, or at the end of the batch), not per event; their sequence numbers are the ones it will give.
        """
        read_message, append = stream.read_message, batch.append
        seq = tracker.next_seq  # of the next event
        pending = 0  # events of the open transaction not told to the tracker yet
        more = True
        for _ in range(READ_BATCH):
            raw = read_message()
            if raw is None:
                more = False
                break
            message = parse(raw.payload)
            if isinstance(message, Insert):
                append(Outgoing(seq, message.type, message.body, message.event_id, message.type, message.timestamp))
                seq += 1
                pending += 1
                room -= 1
                if not room:
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

    def _shutdown(self, stream: ReplicationStream, tracker: PositionTracker, first_seq: int) -> None:
        deadline = time.monotonic() + self._cfg.shutdown_timeout
        log.info("stopping: waiting for outstanding confirms", extra={"in_flight": tracker.in_flight})
        while tracker.in_flight and time.monotonic() < deadline:
            self._wait([self._wake_r], 0.1)
            self._drain(tracker, first_seq)
        stream.feedback(tracker.confirmable)
        log.info("stopped", extra={"lsn": format_lsn(tracker.confirmable), "unconfirmed": tracker.in_flight})

    def _drain(self, tracker: PositionTracker, first_seq: int) -> None:
        while True:
            try:
                seqs = cast(list[int], self._confirmed.get_nowait())
            except queue.Empty:
                return
            if seqs and min(seqs) < first_seq:  # confirmations of a session that ended: not ours to count
                seqs = [seq for seq in seqs if seq >= first_seq]
            tracker.confirmed_many(seqs)

    def _on_confirmed(self, tokens: list[Hashable]) -> None:  # publisher thread
        self._confirmed.put(tokens)
        self._unpoked += len(tokens)
        # A busy loop drains the queue anyway: no pipe write (and GIL hand-off) per ack frame. A sleeping one is
        # poked once `_wake_after` confirmations were queued since the last poke; counting from the last poke
        # rather than from when it fell asleep can only poke earlier, never later.
        if self._asleep and self._unpoked >= self._wake_after:
            self._unpoked = 0
            self._poke()

    def _wait(self, fds: list[int], timeout: float, wake_after: int = 1) -> None:
        """select() on `fds` and the wake-up pipe, unless confirmations are already waiting. The publisher thread
        pokes the pipe once `wake_after` confirmations are queued."""
        self._wake_after = max(1, wake_after)
        self._asleep = True  # set before looking at the queue: a confirmation put after the look pokes the pipe
        try:
            if self._confirmed.empty() and not self._stopping:
                ready, _, _ = select.select(fds, [], [], timeout)
                if self._wake_r in ready:
                    self._clear_wake()
        finally:
            self._asleep = False

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self._stopping = True
        self._poke()

    def _poke(self) -> None:
        with contextlib.suppress(OSError):  # a full pipe wakes the loop just as well
            os.write(self._wake_w, b"x")

    def _clear_wake(self) -> None:
        try:
            while os.read(self._wake_r, 4096):
                pass
        except (BlockingIOError, OSError):
            pass

    def _sleep(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not self._stopping and (left := deadline - time.monotonic()) > 0:
            select.select([self._wake_r], [], [], left)
            self._clear_wake()


def outgoing(event: Event, token: Hashable) -> Outgoing:
    """The AMQP message of an outbox event (SPEC.md section 5)."""
    return Outgoing(token=token, routing_key=event.type, body=encode(event), message_id=str(event.id),
                    type=event.type, timestamp=int(event.occurred_at.timestamp()))
