"""The relay loop: replication stream -> publisher, positions confirmed behind the broker's confirms.

One thread reads the stream, tracks positions and talks to Postgres; the publisher thread owns the broker
connection (docs/adr/0011). They meet in two places: `Publisher.submit` (bounded by the window: the stream is
not read while `window` events are unconfirmed) and the confirmation queue, signalled through a pipe so the
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

READ_BATCH = 500  # messages read before looking at confirmations again
FEEDBACK_MIN_GAP = 0.1  # seconds between two position updates while busy


class Relay:
    def __init__(self, settings: Settings, relay: RelaySettings) -> None:
        self._settings, self._cfg = settings, relay
        self._stopping = False
        self._asleep = False  # the loop waits in select(): confirmations must poke the pipe to wake it
        self._epoch = 0  # one per replication session; confirmations of older sessions are ignored
        self._confirmed: queue.SimpleQueue[list[Hashable]] = queue.SimpleQueue()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._publisher = Publisher(settings.amqp_url, Topology(settings.amqp_prefix), self._on_confirmed,
                                    is_current=lambda token: token[0] == self._epoch,  # type: ignore[index]
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
        epoch = self._epoch
        tracker = PositionTracker(stream.start_lsn)
        if not self._publisher.is_alive():
            self._publisher.start()
        log.info("streaming", extra={"slot": self._settings.slot, "lsn": format_lsn(stream.start_lsn)})
        sent = stream.start_lsn
        last_feedback = time.monotonic()
        while not self._stopping:
            self._drain(tracker, epoch)
            batch: list[Outgoing] = []
            more = False
            if tracker.in_flight < self._cfg.window:
                more = self._read(stream, tracker, batch, epoch)
                if batch:
                    self._publisher.submit(batch)
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
            if tracker.in_flight < self._cfg.window:
                watch.append(stream.fileno())
            self._wait(watch, FEEDBACK_MIN_GAP if tracker.confirmable > sent else min(1.0, self._cfg.status_interval))
        self._shutdown(stream, tracker, epoch)

    def _read(self, stream: ReplicationStream, tracker: PositionTracker, batch: list[Outgoing],
              epoch: int) -> bool:
        """Read up to READ_BATCH messages; True when more may be waiting."""
        for _ in range(READ_BATCH):
            payload = stream.read()
            if payload is None:
                return False
            message = parse(payload)
            if isinstance(message, Insert):
                token = (epoch, tracker.published())
                batch.append(Outgoing(token, message.type, message.body, message.event_id, message.type,
                                      message.timestamp))
                if tracker.in_flight >= self._cfg.window:
                    return False
            elif isinstance(message, Begin):
                tracker.begin()
            elif isinstance(message, Commit):
                tracker.commit(message.next_lsn)
        return True

    def _shutdown(self, stream: ReplicationStream, tracker: PositionTracker, epoch: int) -> None:
        deadline = time.monotonic() + self._cfg.shutdown_timeout
        log.info("stopping: waiting for outstanding confirms", extra={"in_flight": tracker.in_flight})
        while tracker.in_flight and time.monotonic() < deadline:
            self._wait([self._wake_r], 0.1)
            self._drain(tracker, epoch)
        stream.feedback(tracker.confirmable)
        log.info("stopped", extra={"lsn": format_lsn(tracker.confirmable), "unconfirmed": tracker.in_flight})

    def _drain(self, tracker: PositionTracker, epoch: int) -> None:
        while True:
            try:
                tokens = self._confirmed.get_nowait()
            except queue.Empty:
                return
            for token_epoch, seq in cast(list[tuple[int, int]], tokens):
                if token_epoch == epoch:
                    tracker.confirmed(seq)

    def _on_confirmed(self, tokens: list[Hashable]) -> None:  # publisher thread
        self._confirmed.put(tokens)
        if self._asleep:  # a busy loop drains the queue anyway: no pipe write (and GIL hand-off) per ack frame
            self._poke()

    def _wait(self, fds: list[int], timeout: float) -> None:
        """select() on `fds` and the wake-up pipe, unless confirmations are already waiting."""
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
