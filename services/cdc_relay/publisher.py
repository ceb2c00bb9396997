"""Publishes to the events exchange with asynchronous publisher confirms, on its own thread.

Independent of where events come from: callers `submit` `Outgoing` messages carrying an opaque token and get
the tokens back through `on_confirmed` once the broker has confirmed them (never for a nack or a return: those
are republished with backoff, forever, see docs/adr/0012). The pika connection is used only by this thread.

pika's BlockingChannel makes `basic_publish` wait for each confirm once `confirm_delivery()` is on, so the
thread drives the blocking connection's underlying channel (`channel._impl`) with callbacks instead: publish
without waiting, and `process_data_events` delivers basic.ack / basic.nack / basic.return as they come.

At most `window` messages are published and unconfirmed; the rest wait in the thread's ready queue, and each ack
frame refills the window from inside its callback, like a bare publisher would (docs/adr/0011).
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

import pika
import pika.exceptions
import pika.spec

from services.cdc_relay import metrics
from services.cdc_relay.confirms import ConfirmBook
from services.core import amqp, backoff
from services.core.events import CONTENT_TYPE
from services.core.topology import Topology

log = logging.getLogger(__name__)

RETRY_BASE = 0.2
RETRY_CAP = 5.0
LOUD_EVERY = 5.0  # seconds between two "unroutable" warnings
PERSISTENT = pika.DeliveryMode.Persistent.value


class Outgoing(NamedTuple):
    """One message to publish. Immutable; a NamedTuple rather than a frozen dataclass because one is built per
    event and a frozen dataclass's __init__ costs about three times as much."""

    token: Hashable
    routing_key: str
    body: bytes
    message_id: str
    type: str
    timestamp: int


class EventProperties(pika.BasicProperties):  # type: ignore[misc]  # pika is untyped
    """The properties of an event message (SPEC.md section 5): persistent, JSON, with its id, type and time.

    One is built per message on the publisher thread, the relay's busiest: the constant properties are class
    attributes and `__init__` sets the three that vary, instead of BasicProperties' fourteen assignments (~0.3 us
    instead of ~2). `encode()` is pika's own and reads the attributes, so the bytes on the wire are the same as
    BasicProperties(...) with the same values would give (tests/unit/test_relay_pika_pin.py).
    """

    content_type = CONTENT_TYPE
    delivery_mode = PERSISTENT
    content_encoding = headers = priority = correlation_id = reply_to = expiration = None
    user_id = app_id = cluster_id = None

    def __init__(self, message_id: str, type: str, timestamp: int) -> None:
        self.message_id, self.type, self.timestamp = message_id, type, timestamp


@dataclass(slots=True)
class _Attempt:
    message: Outgoing
    tries: int = 0
    first_sent: float | None = None


class Publisher(threading.Thread):
    def __init__(
        self,
        amqp_url: str,
        topology: Topology,
        on_confirmed: Callable[[list[Hashable]], None],
        window: int,
        is_current: Callable[[Hashable], bool] = lambda _token: True,
        blocked_timeout: float = 60.0,
    ) -> None:
        super().__init__(name="publisher", daemon=True)
        self._url, self._topology, self._exchange = amqp_url, topology, topology.events_exchange
        self._window = window  # messages published and not confirmed by the broker, at most
        self._on_confirmed, self._is_current = on_confirmed, is_current
        self._blocked_timeout = blocked_timeout
        self._inbox: queue.SimpleQueue[list[Outgoing]] = queue.SimpleQueue()  # batches, not messages
        self._asleep = False  # waiting in process_data_events: a submit must wake the connection
        self._ready: deque[_Attempt] = deque()
        self._retry: list[tuple[float, int, _Attempt]] = []
        self._counter = itertools.count()
        self._book: ConfirmBook[_Attempt] = ConfirmBook()
        self._conn: pika.BlockingConnection | None = None
        self._channel: Any = None  # pika.channel.Channel under the blocking channel
        self._blocked = False
        self._stopping = threading.Event()
        self._last_loud = 0.0

    # --- any thread ---
    def submit(self, messages: Iterable[Outgoing]) -> None:
        batch = list(messages)
        if batch:
            self._inbox.put(batch)
            if self._asleep:  # a busy publisher looks at the inbox anyway: no wake-up write per batch
                self._wake()

    @property
    def unconfirmed(self) -> int:
        """Messages published and not confirmed yet (at most the window)."""
        return len(self._book)

    def stop(self) -> None:
        self._stopping.set()
        self._wake()

    def _wake(self) -> None:
        conn = self._conn
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.add_callback_threadsafe(lambda: None)

    # --- the publisher thread ---
    def run(self) -> None:
        while not self._stopping.is_set():
            if self._conn is None and not self._connect():
                break
            assert self._conn is not None
            try:
                self._publish_available()
                wait = self._wait_time()
                # With a full window the next ack frame drains the inbox (`_on_ack_nack`): a submit need not wake us.
                if wait and len(self._book) < self._window:
                    self._asleep = True  # before looking at the inbox: a batch submitted after the look wakes us
                    if not self._inbox.empty() or self._stopping.is_set():
                        wait = 0.0
                try:
                    self._conn.process_data_events(time_limit=wait)
                finally:
                    self._asleep = False
            except pika.exceptions.AMQPError as exc:
                log.warning("broker connection lost, reconnecting", extra={"error": repr(exc)})
                metrics.RECONNECTS.labels("rabbitmq").inc()
                self._drop_connection()
        self._drop_connection()

    def _connect(self) -> bool:
        conn = amqp.connect_with_retry(self._url, name="walfeed-relay", should_stop=self._stopping.is_set,
                                       blocked_connection_timeout=self._blocked_timeout)
        if conn is None:
            return False
        try:
            blocking = conn.channel()
            amqp.declare_events_exchange(blocking, self._topology)
            channel = blocking._impl
            selected: list[bool] = []
            channel.add_on_return_callback(self._on_return)
            channel.confirm_delivery(ack_nack_callback=self._on_ack_nack, callback=lambda _f: selected.append(True))
            while not selected:
                conn.process_data_events(time_limit=0.1)
            conn.add_on_connection_blocked_callback(self._on_blocked)
            conn.add_on_connection_unblocked_callback(self._on_unblocked)
        except pika.exceptions.AMQPError as exc:
            log.warning("broker channel set-up failed, reconnecting", extra={"error": repr(exc)})
            if conn.is_open:
                conn.close()
            return not self._stopping.is_set()
        self._conn, self._channel, self._blocked = conn, channel, False
        resend = self._book.reset()
        self._ready.extendleft(reversed(resend))
        log.info("broker connected", extra={"exchange": self._topology.events_exchange, "resend": len(resend)})
        return True

    def _drop_connection(self) -> None:
        conn, self._conn, self._channel = self._conn, None, None
        if conn is not None and conn.is_open:
            with contextlib.suppress(Exception):
                conn.close()

    def _wait_time(self) -> float:
        if self._ready and not self._blocked and len(self._book) < self._window:
            return 0.0  # a full window is refilled by the ack callback, inside process_data_events
        wait = 0.5
        if self._retry:
            wait = min(wait, max(0.0, self._retry[0][0] - time.monotonic()))
        return wait

    def _publish_available(self) -> None:
        now = time.monotonic()
        while self._retry and self._retry[0][0] <= now:
            self._ready.append(heapq.heappop(self._retry)[2])
        while True:
            try:
                self._ready.extend(map(_Attempt, self._inbox.get_nowait()))
            except queue.Empty:
                break
        # The hot loop of the relay: names looked up once, not per message.
        ready, publish, sent, is_current = self._ready, self._channel.basic_publish, self._book.sent, self._is_current
        exchange, properties, room = self._exchange, EventProperties, self._window - len(self._book)
        while ready and room > 0 and not self._blocked:
            attempt = ready.popleft()
            message = attempt.message
            if not is_current(message.token):
                continue  # from a replication session that ended: Postgres sends it again
            publish(exchange, message.routing_key, message.body,
                    properties(message.message_id, message.type, message.timestamp), mandatory=True)
            sent(message.message_id, attempt)
            room -= 1
            if attempt.first_sent is None:
                attempt.first_sent = now

    def _on_return(self, _channel: Any, method: pika.spec.Basic.Return, properties: pika.BasicProperties,
                   _body: bytes) -> None:
        self._book.returned(str(properties.message_id))
        self._loud("event unroutable: no queue is bound for it on the events exchange; retrying, WAL position "
                   "held", {"event_id": properties.message_id, "routing_key": method.routing_key})

    def _on_ack_nack(self, frame: Any) -> None:
        method = frame.method
        if isinstance(method, pika.spec.Basic.Ack):
            outcome = self._book.acked(method.delivery_tag, method.multiple)
        else:
            outcome = self._book.nacked(method.delivery_tag, method.multiple)
            self._loud("broker nacked events; retrying", {"count": len(outcome.failed)})
        now = time.monotonic()
        confirmed = outcome.confirmed
        if confirmed:  # metrics per ack frame, not per event
            metrics.CONFIRM_LATENCY.observe_since(now, [a.first_sent or now for a in confirmed])
            metrics.PUBLISHED.inc(len(confirmed))
            self._on_confirmed([a.message.token for a in confirmed])
        for attempt in outcome.failed:
            attempt.tries += 1
            metrics.UNROUTABLE.inc()
            due = now + backoff.delay(attempt.tries, RETRY_BASE, RETRY_CAP)
            heapq.heappush(self._retry, (due, next(self._counter), attempt))
        if self._channel is not None and (self._ready or not self._inbox.empty()):
            # Refill the window now, from inside process_data_events (which returns only at its time limit or a
            # wake-up): the broker never waits for the loop to come round.
            self._publish_available()

    def _on_blocked(self, _conn: Any, _frame: Any) -> None:
        self._blocked = True
        log.warning("broker blocked publishing (resource alarm): holding events, WAL status updates continue")

    def _on_unblocked(self, _conn: Any, _frame: Any) -> None:
        self._blocked = False
        log.info("broker unblocked publishing")

    def _loud(self, message: str, extra: dict[str, Any]) -> None:
        now = time.monotonic()
        if now - self._last_loud >= LOUD_EVERY:
            self._last_loud = now
            log.warning(message, extra={**extra, "retrying": len(self._retry) + 1})
