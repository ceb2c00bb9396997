"""`walfeed relay --source poll`: the polling outbox relay, for databases where logical replication is not allowed.

Claims batches of unpublished outbox rows (FOR UPDATE SKIP LOCKED plus a lease, poll_sql.py), publishes them
through the CDC relay's publisher on a thread of its own (publisher.PublisherThread: asynchronous confirms,
returns and nacks retried) and marks them `published_at` only after the broker confirmed them. Several pollers
may run at once; a dead poller's rows are claimed again when its lease runs out. Decisions live in
poll_policy.py (settings table there); this module is the loop and the Postgres adapter (psycopg 3,
autocommit). docs/adr/0040.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import select
import signal
import socket
import time
import uuid
from types import FrameType

import psycopg
from prometheus_client import Counter
from psycopg.rows import TupleRow

from services.cdc_relay import metrics, poll_sql, routes
from services.cdc_relay.config import RelaySettings
from services.cdc_relay.messages import Outgoing, outgoing
from services.cdc_relay.poll_policy import (
    MARK_MIN_GAP,
    Claims,
    PollSettings,
    claim_size,
    mark_due,
    next_poll_delay,
)
from services.cdc_relay.publisher_thread import PublisherThread
from services.core import backoff, sdnotify, tracing
from services.core.settings import Settings
from services.core.topology import Topology

log = logging.getLogger(__name__)

POLLS = Counter("walfeed_relay_polls_total", "Claim statements run by the polling source")
EMPTY_POLLS = Counter("walfeed_relay_empty_polls_total", "Claim statements that found nothing to publish")

# A lost or refused connection, or a statement the server failed for reasons of its own (shutdown, cancel, lock
# timeout: psycopg's OperationalError): reconnect with backoff.
PostgresUnavailable = (psycopg.OperationalError, psycopg.InterfaceError)


def poller_id() -> str:
    """Who holds a claim: host, pid and a random part (a restarted process is a new poller)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Waker:
    """A self-pipe: the publisher thread and signal handlers poke it, the loop waits on it with a timeout."""

    def __init__(self) -> None:
        self._r, self._w = os.pipe()
        os.set_blocking(self._r, False)
        os.set_blocking(self._w, False)

    def poke(self) -> None:
        with contextlib.suppress(OSError):  # a full pipe wakes the loop just as well
            os.write(self._w, b"x")

    def wait(self, timeout: float) -> None:
        select.select([self._r], [], [], max(0.0, timeout))
        with contextlib.suppress(OSError):
            while os.read(self._r, 4096):
                pass

    def close(self) -> None:
        os.close(self._r)
        os.close(self._w)


class Poller:
    def __init__(self, settings: Settings, relay: RelaySettings, poll: PollSettings,
                 traces: tracing.Tracing = tracing.DISABLED) -> None:
        self._settings, self._relay, self._poll = settings, relay, poll
        self.id = poller_id()
        self._stopping = False
        self._claims = Claims()
        self._confirmed: queue.SimpleQueue[list[str]] = queue.SimpleQueue()
        self._waker = Waker()
        self._conn: psycopg.Connection[TupleRow] | None = None
        self._next_poll = 0.0
        self._last_mark = 0.0
        self._publisher: PublisherThread[str] = PublisherThread(
            settings.amqp_url, Topology(settings.amqp_prefix), self._on_confirmed, window=relay.window,
            blocked_timeout=relay.blocked_timeout, traces=traces)

    def run(self) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)
        self._publisher.start()
        log.info("polling", extra={"poller": self.id, "interval": self._poll.interval, "batch": self._poll.batch,
                                   "lease": self._poll.lease})
        sdnotify.ready("polling the outbox")
        attempt = 0
        try:
            while not self._stopping:
                try:
                    self._step()
                    attempt = 0
                except PostgresUnavailable as exc:
                    attempt += 1
                    metrics.RECONNECTS.labels("postgres").inc()
                    wait = backoff.delay(attempt, 0.5, 10.0)
                    log.warning("postgres unreachable, retrying", extra={"error": str(exc).strip(),
                                                                         "retry_in": round(wait, 2)})
                    self._disconnect()
                    self._waker.wait(wait)
            self._shutdown()
            return 0
        finally:
            self._publisher.stop()
            if self._publisher.is_alive():
                self._publisher.join(5.0)
            self._disconnect()
            self._waker.close()

    def _step(self) -> None:
        self._drain()
        self._mark(stopping=False)
        now = time.monotonic()
        size = claim_size(self._poll.batch, self._relay.window, self._claims.in_flight)
        if size and now >= self._next_poll:
            got = self._claim(size)
            self._next_poll = now + next_poll_delay(size, got, self._poll.interval)
            if self._next_poll <= now and claim_size(self._poll.batch, self._relay.window, self._claims.in_flight):
                return  # a full batch and room for more: poll again at once
        timeout = self._poll.interval if not size else self._next_poll - now
        if self._claims.pending_marks:
            timeout = min(timeout, self._last_mark + MARK_MIN_GAP - now)
        self._waker.wait(timeout)

    def _claim(self, size: int) -> int:
        conn = self._connection()
        began = time.monotonic()
        rows = conn.execute(poll_sql.CLAIM, poll_sql.claim_params(self.id, size, self._poll.lease)).fetchall()
        POLLS.inc()
        if not rows:
            EMPTY_POLLS.inc()
            return 0
        batch: list[Outgoing[str]] = []
        for row in poll_sql.claim_order(rows):
            event = poll_sql.row_event(row)
            batch.append(outgoing(event, str(event.id), poll_sql.row_traceparent(row)))
        messages = routes.poll(batch)  # a fan-out event twice: alone, and for walfeed's consumers (ADR 0115)
        self._claims.claimed(m.token for m in messages)
        metrics.IN_FLIGHT.set(self._claims.in_flight)
        self._publisher.submit(messages)
        log.debug("claimed", extra={"count": len(batch), "in_flight": self._claims.in_flight,
                                    "claim_ms": round((time.monotonic() - began) * 1000, 1)})
        return len(batch)

    def _mark(self, stopping: bool) -> None:
        now = time.monotonic()
        if not mark_due(self._claims.pending_marks, self._poll.batch, now - self._last_mark, stopping):
            return
        ids = self._claims.take_marks()
        try:
            self._connection().execute(poll_sql.MARK_PUBLISHED, poll_sql.mark_params(ids))
        except BaseException:
            self._claims.mark_failed(ids)
            raise
        self._last_mark = now

    def _drain(self) -> None:
        while True:
            try:
                tokens = self._confirmed.get_nowait()
            except queue.Empty:
                break
            self._claims.confirmed(tokens)
        metrics.IN_FLIGHT.set(self._claims.in_flight)

    def _shutdown(self) -> None:
        """Stop claiming, wait (bounded) for outstanding confirms, mark what was confirmed. Leases do the rest."""
        log.info("stopping: waiting for outstanding confirms", extra={"in_flight": self._claims.in_flight})
        deadline = time.monotonic() + self._relay.shutdown_timeout
        self._drain()
        while self._claims.in_flight and time.monotonic() < deadline:
            self._waker.wait(min(0.1, deadline - time.monotonic()))
            self._drain()
        marked = self._claims.pending_marks
        try:
            self._mark(stopping=True)
        except PostgresUnavailable as exc:
            log.warning("could not mark confirmed events: they are published again after their lease",
                        extra={"error": str(exc).strip(), "count": marked})
            marked = 0
        log.info("stopped", extra={"poller": self.id, "marked": marked, "unconfirmed": self._claims.in_flight})

    def _connection(self) -> psycopg.Connection[TupleRow]:
        if self._conn is None or self._conn.closed:
            self._conn = psycopg.connect(self._settings.database_url, autocommit=True, connect_timeout=5,
                                         application_name="walfeed-poller")
        return self._conn

    def _disconnect(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                conn.close()

    def _on_confirmed(self, tokens: list[str]) -> None:  # publisher thread
        self._confirmed.put(tokens)
        self._waker.poke()

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self._stopping = True
        self._waker.poke()


def run(settings: Settings, relay: RelaySettings, traces: tracing.Tracing = tracing.DISABLED) -> int:
    return Poller(settings, relay, PollSettings.from_env(), traces).run()
