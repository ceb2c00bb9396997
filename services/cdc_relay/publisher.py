"""Publishes to the events exchange with asynchronous publisher confirms, driven by a pika IOLoop.

Independent of where events come from: callers `submit` `Outgoing` messages carrying an opaque token and get
the tokens back through `on_confirmed` once the broker has confirmed them (never for a nack or a return: those
are republished with backoff, forever, see docs/adr/0012). A caller whose tokens can go stale (the relay's, when a
replication session ends: Postgres sends those events again) passes `is_current` and calls `drop_stale`; stale
messages still waiting, or failing later, are not published again (docs/adr/0015).

`Publisher` runs on the IOLoop it is given, in that loop's thread, and never blocks it: pika's asynchronous
`SelectConnection`, whose `Channel.confirm_delivery(ack_nack_callback=...)` delivers basic.ack / basic.nack /
basic.return as callbacks. The CDC relay gives it its own loop, shared with the replication socket (one thread,
docs/adr/0014). `PublisherThread` runs one on a thread and loop of its own, for callers that block (the polling
source).

At most `window` messages are published and unconfirmed; the rest wait in the ready queue, and each ack frame
refills the window from inside its callback. A lost connection is reopened with capped backoff (a booting broker
is normal) and everything unconfirmed is published again, oldest first: duplicates, never losses.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterable
from typing import Any, NamedTuple

import pika
import pika.exceptions
import pika.spec
from pika.adapters.select_connection import IOLoop

from services.cdc_relay import metrics
from services.cdc_relay.confirms import ConfirmBook
from services.core import amqp, backoff
from services.core.events import CONTENT_TYPE
from services.core.topology import Topology

log = logging.getLogger(__name__)

RETRY_BASE = 0.2
RETRY_CAP = 5.0
CONNECT_BASE = 0.5
CONNECT_CAP = 15.0
LOUD_EVERY = 5.0  # seconds between two "unroutable" warnings
CLOSE_TIMEOUT = 5.0  # seconds `stop` waits for the broker's close-ok
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

    One is built per message on the relay's hot path: the constant properties are class attributes and `__init__`
    sets the three that vary, instead of BasicProperties' fourteen assignments (~0.3 us instead of ~2).
    `encode()` is pika's own and reads the attributes, so the bytes on the wire are the same as
    BasicProperties(...) with the same values would give (tests/unit/test_relay_pika_pin.py).
    """

    content_type = CONTENT_TYPE
    delivery_mode = PERSISTENT
    content_encoding = headers = priority = correlation_id = reply_to = expiration = None
    user_id = app_id = cluster_id = None

    def __init__(self, message_id: str, type: str, timestamp: int) -> None:
        self.message_id, self.type, self.timestamp = message_id, type, timestamp


class Publisher:
    def __init__(
        self,
        ioloop: IOLoop,
        amqp_url: str,
        topology: Topology,
        on_confirmed: Callable[[list[Hashable]], None],
        window: int,
        is_current: Callable[[Hashable], bool] = lambda _token: True,
        blocked_timeout: float = 60.0,
    ) -> None:
        self._ioloop = ioloop
        self._url, self._topology, self._exchange = amqp_url, topology, topology.events_exchange
        self._on_confirmed, self._is_current = on_confirmed, is_current
        self._window = window  # messages published and not confirmed by the broker, at most
        self._blocked_timeout = blocked_timeout
        self._ready: deque[Outgoing] = deque()
        self._retry: list[tuple[float, int, Outgoing]] = []
        self._retry_timer: Any = None
        self._counter = itertools.count()
        # Each message published and unconfirmed, with the time it was first published. Messages that failed
        # (returned, nacked, or unconfirmed on a lost channel) wait in `_ready` or `_retry`: their failed tries and
        # first publish time are kept by message id until they are confirmed (the usual message never fails, and
        # costs neither dict anything).
        self._book: ConfirmBook[tuple[Outgoing, float]] = ConfirmBook()
        self._tries: dict[str, int] = {}
        self._first_sent: dict[str, float] = {}
        self._conn: pika.SelectConnection | None = None
        self._channel: Any = None  # pika.channel.Channel, set once in confirm mode
        self._blocked = False
        self._attempt = 0  # failed connection attempts in a row
        self._reconnect_timer: Any = None
        self._stopping = False
        self._on_stopped: Callable[[], None] | None = None
        self._last_loud = 0.0

    @property
    def unconfirmed(self) -> int:
        """Messages published and not confirmed yet (at most the window)."""
        return len(self._book)

    @property
    def waiting(self) -> int:
        """Messages held to be published: ready, or failed and waiting for their retry."""
        return len(self._ready) + len(self._retry)

    def start(self) -> None:
        self._connect()

    def submit(self, messages: Iterable[Outgoing]) -> None:
        self._ready.extend(messages)
        self._publish_available()

    def drop_stale(self) -> None:
        """Forget the waiting messages `is_current` no longer accepts (the caller's source will send them again).
        Stale messages are dropped here and where a failure would queue them again, not per publish."""
        is_current = self._is_current
        stale = [m for m in self._ready if not is_current(m.token)]
        stale += [entry[2] for entry in self._retry if not is_current(entry[2].token)]
        if not stale:
            return
        self._ready = deque(m for m in self._ready if is_current(m.token))
        self._retry = [entry for entry in self._retry if is_current(entry[2].token)]
        heapq.heapify(self._retry)
        for message in stale:
            self._tries.pop(message.message_id, None)
            self._first_sent.pop(message.message_id, None)

    def stop(self, on_stopped: Callable[[], None]) -> None:
        """Close the connection; `on_stopped` is called once it is closed (at most CLOSE_TIMEOUT later)."""
        if self._stopping:
            return
        self._stopping = True
        called = [False]

        def stopped() -> None:
            if not called[0]:
                called[0] = True
                on_stopped()

        self._on_stopped = stopped
        for timer in (self._retry_timer, self._reconnect_timer):
            if timer is not None:
                self._ioloop.remove_timeout(timer)
        self._retry_timer = self._reconnect_timer = None
        conn = self._conn
        if conn is None or conn.is_closed:
            stopped()
            return
        self._ioloop.call_later(CLOSE_TIMEOUT, stopped)
        if conn.is_open:
            conn.close()
        # Else it is closing already (`_on_closed` finishes), or still opening: closing it in the middle of the
        # handshake trips an assertion in pika's connection workflow, so `_on_open` closes it once it is open and
        # `_on_open_error` finishes if it never opens.

    # --- connection life cycle (callbacks on the loop) ---
    def _connect(self) -> None:
        self._reconnect_timer = None
        params = amqp.parameters(self._url, name="walfeed-relay", blocked_connection_timeout=self._blocked_timeout)
        self._conn = pika.SelectConnection(params, on_open_callback=self._on_open,
                                           on_open_error_callback=self._on_open_error,
                                           on_close_callback=self._on_closed, custom_ioloop=self._ioloop)

    def _on_open(self, conn: pika.SelectConnection) -> None:
        if self._stopping:
            conn.close()
            return
        conn.add_on_connection_blocked_callback(self._on_blocked)
        conn.add_on_connection_unblocked_callback(self._on_unblocked)
        conn.channel(on_open_callback=self._on_channel)

    def _on_channel(self, channel: Any) -> None:
        channel.add_on_close_callback(self._on_channel_closed)
        channel.add_on_return_callback(self._on_return)
        channel.exchange_declare(self._exchange, **amqp.EVENTS_EXCHANGE,
                                 callback=lambda _frame: channel.confirm_delivery(
                                     ack_nack_callback=self._on_ack_nack,
                                     callback=lambda _frame: self._on_confirm_mode(channel)))

    def _on_confirm_mode(self, channel: Any) -> None:
        self._channel, self._blocked, self._attempt = channel, False, 0
        log.info("broker connected", extra={"exchange": self._exchange, "resend": len(self._ready)})
        self._publish_available()

    def _on_channel_closed(self, _channel: Any, reason: BaseException) -> None:
        # The broker closed the channel (a declaration refused, say): start over with a new connection.
        self._channel = None
        conn = self._conn
        if conn is not None and conn.is_open:
            log.warning("broker closed the channel, reconnecting", extra={"error": repr(reason)})
            conn.close()

    def _on_open_error(self, _conn: Any, error: BaseException) -> None:
        self._conn = None
        if self._stopping:
            self._finish_stop()
            return
        self._attempt += 1
        wait = backoff.delay(self._attempt, CONNECT_BASE, CONNECT_CAP)
        log.warning("broker unreachable, retrying", extra={"attempt": self._attempt, "error": repr(error),
                                                            "retry_in": round(wait, 2)})
        self._reconnect_timer = self._ioloop.call_later(wait, self._connect)

    def _on_closed(self, _conn: Any, reason: BaseException) -> None:
        self._conn, self._channel, self._blocked = None, None, False
        # Nothing is in flight on a closed channel: everything unconfirmed goes first in the queue, to be published
        # again (the broker may or may not have it: resending is the at-least-once answer).
        self._ready.extendleft(reversed(self._fail(self._book.reset())))
        if self._stopping:
            self._finish_stop()
            return
        log.warning("broker connection lost, reconnecting", extra={"error": repr(reason)})
        metrics.RECONNECTS.labels("rabbitmq").inc()
        self._attempt += 1
        self._reconnect_timer = self._ioloop.call_later(backoff.delay(self._attempt, CONNECT_BASE, CONNECT_CAP),
                                                        self._connect)

    def _finish_stop(self) -> None:
        if self._on_stopped is not None:
            self._on_stopped()

    # --- publishing and confirms ---
    def _publish_available(self) -> None:
        channel = self._channel
        if channel is None or self._blocked:
            return
        # The hot loop of the relay: names looked up once, not per message.
        ready, publish, sent = self._ready, channel.basic_publish, self._book.sent
        exchange, properties, first_sent = self._exchange, EventProperties, self._first_sent
        room = min(len(ready), self._window - len(self._book))
        now = time.monotonic()
        for _ in range(room):
            message = ready.popleft()
            publish(exchange, message.routing_key, message.body,
                    properties(message.message_id, message.type, message.timestamp), mandatory=True)
            sent(message.message_id, (message, first_sent.pop(message.message_id, now) if first_sent else now))

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
            metrics.CONFIRM_LATENCY.observe_since(now, [at for _, at in confirmed])
            metrics.PUBLISHED.inc(len(confirmed))
            if self._tries:
                for message, _ in confirmed:
                    self._tries.pop(message.message_id, None)
            self._on_confirmed([message.token for message, _ in confirmed])
        if outcome.failed:
            for message in self._fail(outcome.failed):
                metrics.UNROUTABLE.inc()
                tries = self._tries[message.message_id] = self._tries.get(message.message_id, 0) + 1
                due = now + backoff.delay(tries, RETRY_BASE, RETRY_CAP)
                heapq.heappush(self._retry, (due, next(self._counter), message))
            if self._retry:
                self._schedule_retry(now)
        self._publish_available()  # refill the window at once: the broker never waits for a loop to come round

    def _fail(self, entries: list[tuple[Outgoing, float]]) -> list[Outgoing]:
        """Messages that must be published again: their first publish time is kept; stale ones are dropped."""
        is_current, again = self._is_current, []
        for message, first_sent in entries:
            if is_current(message.token):
                self._first_sent.setdefault(message.message_id, first_sent)
                again.append(message)
            else:
                self._tries.pop(message.message_id, None)
                self._first_sent.pop(message.message_id, None)
        return again

    def _schedule_retry(self, now: float) -> None:
        if self._retry_timer is not None:
            self._ioloop.remove_timeout(self._retry_timer)
        self._retry_timer = self._ioloop.call_later(max(0.0, self._retry[0][0] - now), self._on_retry_due)

    def _on_retry_due(self) -> None:
        self._retry_timer = None
        now = time.monotonic()
        while self._retry and self._retry[0][0] <= now:
            self._ready.append(heapq.heappop(self._retry)[2])
        if self._retry:
            self._schedule_retry(now)
        self._publish_available()

    def _on_blocked(self, _conn: Any, _frame: Any) -> None:
        self._blocked = True
        log.warning("broker blocked publishing (resource alarm): holding events, WAL status updates continue")

    def _on_unblocked(self, _conn: Any, _frame: Any) -> None:
        self._blocked = False
        log.info("broker unblocked publishing")
        self._publish_available()

    def _loud(self, message: str, extra: dict[str, Any]) -> None:
        now = time.monotonic()
        if now - self._last_loud >= LOUD_EVERY:
            self._last_loud = now
            log.warning(message, extra={**extra, "retrying": len(self._retry) + 1})


class PublisherThread(threading.Thread):
    """A `Publisher` on a thread and IOLoop of its own, for callers with a blocking loop. `on_confirmed` is called
    on this thread; `submit` and `stop` may be called from any thread."""

    def __init__(self, amqp_url: str, topology: Topology, on_confirmed: Callable[[list[Hashable]], None],
                 window: int, blocked_timeout: float = 60.0) -> None:
        super().__init__(name="publisher", daemon=True)
        self._ioloop = IOLoop()
        self._publisher = Publisher(self._ioloop, amqp_url, topology, on_confirmed, window,
                                    blocked_timeout=blocked_timeout)

    @property
    def unconfirmed(self) -> int:
        return self._publisher.unconfirmed

    def run(self) -> None:
        self._publisher.start()
        try:
            self._ioloop.start()
        finally:
            self._ioloop.close()

    def submit(self, messages: Iterable[Outgoing]) -> None:
        batch = list(messages)
        if batch:
            self._ioloop.add_callback_threadsafe(lambda: self._publisher.submit(batch))

    def stop(self) -> None:
        self._ioloop.add_callback_threadsafe(lambda: self._publisher.stop(self._ioloop.stop))
