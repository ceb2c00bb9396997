"""Publishes to the events exchange with asynchronous publisher confirms, driven by a pika IOLoop: the pika side.

Independent of where events come from: callers `submit` `Outgoing` messages carrying an opaque token and get
the tokens back through `on_confirmed` once the broker has confirmed them (never for a nack or a return: those
are republished with backoff, forever, see docs/adr/0012). A caller whose tokens can go stale (the relay's, when a
replication session ends) passes `is_current` and calls `drop_stale`. What becomes of each message (window,
retries, stale ones) is decided in publisher_state.py; this module is the connection, its callbacks and timers.

`Publisher` runs on the IOLoop it is given, in that loop's thread, and never blocks it: pika's asynchronous
`SelectConnection`, whose `Channel.confirm_delivery(ack_nack_callback=...)` delivers basic.ack / basic.nack /
basic.return as callbacks. The CDC relay gives it its own loop, shared with the replication socket (one thread,
docs/adr/0014); `publisher_thread.PublisherThread` runs one on a thread of its own (the polling source). Each ack
frame refills the window from inside its callback. A lost connection is reopened with capped backoff (a booting
broker is normal). With several broker nodes (WALFEED_AMQP_URL, services/core/nodes.py) it connects to the first
that answers, in their order: a node refusing goes on to the next at once, and only a whole round refused waits the
backoff. Whatever was unconfirmed on a lost connection is published again on the next one (publisher_state.py):
its WAL position was never confirmed, whichever node had received it (docs/adr/0090).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any, Generic

import pika
import pika.spec
from pika.adapters.select_connection import IOLoop

from services.cdc_relay import metrics
from services.cdc_relay.messages import EVENTS, GROUPED, SINGLE, EventProperties, Outgoing, group_properties
from services.cdc_relay.publisher_state import PublisherState, T, always_current
from services.core import amqp, backoff, tracecontext, tracing
from services.core.events import TRACEPARENTS_HEADER
from services.core.nack_streak import NackStreak
from services.core.topology import Topology
from services.core.tracecontext import HEADER as TRACEPARENT

log = logging.getLogger(__name__)

CONNECT_BASE = 0.5
CONNECT_CAP = 15.0
LOUD_EVERY = 5.0  # seconds between two "unroutable" warnings
CLOSE_TIMEOUT = 5.0  # seconds `stop` waits for the broker's close-ok


class Publisher(Generic[T]):
    def __init__(self, ioloop: IOLoop, amqp_url: str, topology: Topology, on_confirmed: Callable[[list[T]], None],
                 window: int, is_current: Callable[[T], bool] = always_current, blocked_timeout: float = 60.0,
                 traces: tracing.Tracing = tracing.DISABLED) -> None:
        self._ioloop = ioloop
        # A send span per confirmed message when tracing (docs/adr/0072): one per group too, child of its first
        # event's context (messages.Outgoing.traceparent); the group's other events' contexts travel in its header.
        self._traces = traces
        self._exchange, self._grouped = topology.events_exchange, topology.grouped_exchange
        # (exchange, mandatory) by Outgoing.route (routes.py, docs/adr/0115): a fan-out event's SINGLE copy is not
        # mandatory, since consumers that are not walfeed's may or may not be bound; the others are (ADR 0012).
        self._routes = {EVENTS: (self._exchange, True), SINGLE: (self._exchange, False),
                        GROUPED: (self._grouped, True)}
        self._nodes = amqp.node_parameters(amqp_url, name="walfeed-relay", blocked_connection_timeout=blocked_timeout)
        self._node = 0  # index in _nodes of the node connected, or tried next
        self._on_confirmed = on_confirmed
        self._state: PublisherState[T] = PublisherState(window, is_current)
        self._retry_timer: Any = None
        self._conn: pika.SelectConnection | None = None
        self._channel: Any = None  # pika.channel.Channel, set once in confirm mode
        self._blocked = False
        self._attempt = 0  # failed connection attempts in a row
        self._reconnect_timer: Any = None
        self._stopping = False
        self._on_stopped: Callable[[], None] | None = None
        self._last_loud = 0.0
        self._nacks = NackStreak()

    @property
    def unconfirmed(self) -> int:
        """Messages published and not confirmed yet (at most the window)."""
        return self._state.unconfirmed

    @property
    def waiting(self) -> int:
        """Messages held to be published: ready, or failed and waiting for their retry."""
        return self._state.waiting

    def start(self) -> None:
        self._connect()

    def submit(self, messages: Iterable[Outgoing[T]]) -> None:
        self._state.submit(messages)
        self._publish_available()

    def drop_stale(self) -> None:
        """Forget the waiting messages `is_current` no longer accepts (the caller's source will send them again)."""
        self._state.drop_stale()

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
        self._conn = pika.SelectConnection(self._nodes[self._node], on_open_callback=self._on_open,
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
                                 callback=lambda _frame: channel.exchange_declare(
                                     self._grouped, **amqp.EVENTS_EXCHANGE,
                                     callback=lambda _frame: self._on_declared(channel)))

    def _on_declared(self, channel: Any) -> None:
        channel.confirm_delivery(ack_nack_callback=self._on_ack_nack,
                                 callback=lambda _frame: self._on_confirm_mode(channel))

    def _on_confirm_mode(self, channel: Any) -> None:
        self._channel, self._blocked, self._attempt = channel, False, 0
        self._nacks.reset()
        node = self._nodes[self._node]
        log.info("broker connected", extra={"exchange": self._exchange, "resend": self._state.ready,
                                            "node": f"{node.host}:{node.port}"})
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
        failed = self._nodes[self._node]
        self._node = (self._node + 1) % len(self._nodes)
        if self._node != 0:  # the next node at once; a round of them all refused: back off
            log.warning("broker node unreachable, trying the next", extra={
                "node": f"{failed.host}:{failed.port}", "error": repr(error)})
            self._reconnect_timer = self._ioloop.call_later(0, self._connect)
            return
        wait = self._reconnect_later()
        log.warning("broker unreachable, retrying", extra={"attempt": self._attempt, "error": repr(error),
                                                            "retry_in": round(wait, 2)})

    def _on_closed(self, _conn: Any, reason: BaseException) -> None:
        self._conn, self._channel, self._blocked = None, None, False
        again = self._state.channel_lost()
        if self._stopping:
            self._finish_stop()
            return
        log.warning("broker connection lost, reconnecting", extra={"error": repr(reason)})
        metrics.RECONNECTS.labels("rabbitmq").inc()
        metrics.REPUBLISHED.labels("reconnected").inc(again)
        self._node = 0
        self._reconnect_later()

    def _reconnect_later(self) -> float:
        """Connect again after a capped backoff that grows with the failed attempts in a row; returns the wait."""
        self._attempt += 1
        wait = backoff.delay(self._attempt, CONNECT_BASE, CONNECT_CAP)
        self._reconnect_timer = self._ioloop.call_later(wait, self._connect)
        return wait

    def _finish_stop(self) -> None:
        if self._on_stopped is not None:
            self._on_stopped()

    # --- publishing and confirms ---
    def _publish_available(self) -> None:
        channel = self._channel
        if channel is None or self._blocked:
            return
        # The hot loop of the relay: names looked up once, not per message.
        publish, routes, properties = channel.basic_publish, self._routes, EventProperties
        for message in self._state.to_publish(time.monotonic()):
            exchange, mandatory = routes[message.route]
            publish(exchange, message.type, message.body,
                    properties(message.message_id, message.type, message.timestamp, message.traceparent)
                    if message.traceparents is None else group_properties(message), mandatory=mandatory)

    def _on_return(self, _channel: Any, method: pika.spec.Basic.Return, properties: pika.BasicProperties,
                   _body: bytes) -> None:
        self._state.returned(str(properties.message_id))
        contexts = (properties.headers or {}).get(TRACEPARENTS_HEADER)  # a group's, one per event (ADR 0095)
        headers = {TRACEPARENT: next((c for c in contexts if c), None)} if isinstance(contexts, list) else \
            properties.headers
        self._loud("event unroutable: no queue is bound for it on the events exchange; retrying, WAL position "
                   "held", {"event_id": properties.message_id, "routing_key": method.routing_key,
                            "trace_id": tracecontext.trace_id(headers)})

    def _on_ack_nack(self, frame: Any) -> None:
        method = frame.method
        now = time.monotonic()
        reopen, why = False, "returned"  # an ack settles as failed only what the broker returned before it
        if isinstance(method, pika.spec.Basic.Ack):
            settled = self._state.acked(method.delivery_tag, method.multiple)
            self._nacks.acked()
        else:
            why = "nacked"
            settled = self._state.nacked(method.delivery_tag, method.multiple, now)
            self._loud("broker nacked events; retrying", {"messages": len(settled.failed)})
            reopen = self._nacks.nacked(now)
        if settled.tokens:  # metrics per ack frame, not per event
            metrics.CONFIRM_LATENCY.observe_since(now, settled.first_sent)
            metrics.PUBLISHED.inc(settled.events)
            if self._traces.enabled:  # one send span per event: its walfeed copy's, or a delivery event's
                for route, exchange in ((EVENTS, self._exchange), (GROUPED, self._grouped)):
                    sent = [tracing.Sent(m.traceparent, m.message_id, m.type, at)
                            for m, at in settled.confirmed if m.route == route]
                    if sent:
                        self._traces.sent(exchange, sent, now)
            self._on_confirmed(settled.tokens)
        if settled.failed:
            retried = self._state.retry(settled.failed, now)
            if retried:
                metrics.UNROUTABLE.inc(retried)
                metrics.REPUBLISHED.labels(why).inc(retried)
            self._schedule_retry(now)  # also for the next probe, when none of them is published again
        if reopen and self._conn is not None and self._conn.is_open:
            log.warning("broker nacked everything on this channel for a while: reconnecting (nack_streak.py)")
            self._channel = None  # nothing more published on it; `_on_closed` reconnects and republishes
            self._conn.close()
            return
        self._publish_available()  # refill the window now, not on the next turn of the loop

    def _schedule_retry(self, now: float) -> None:
        if self._retry_timer is not None:
            self._ioloop.remove_timeout(self._retry_timer)
            self._retry_timer = None
        due = self._state.next_due
        if due is not None:
            self._retry_timer = self._ioloop.call_later(max(0.0, due - now), self._on_retry_due)

    def _on_retry_due(self) -> None:
        self._retry_timer = None
        now = time.monotonic()
        self._state.due(now)
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
            log.warning(message, extra={**extra, "retrying": self._state.retrying + 1})
