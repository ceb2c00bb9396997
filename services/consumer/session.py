"""One broker connection's consumer, for every walfeed consumer: declare its queues, set the prefetch, consume,
hand what is ready to the strategy, settle on the connection thread, and on stop return what is not started and
drain the rest (docs/adr/0125).

pika's BlockingConnection is not thread-safe and only services heartbeats while this thread runs its I/O loop, so
the handler's work runs in other threads and every channel operation (publish, ack, nack) is handed back to the
connection thread with `add_callback_threadsafe` (pika's basic_consumer_threaded example).

What runs where is the strategy's (services/consumer/batched.py: batches of what is ready on a pool of threads;
services/consumer/connection_thread.py: the statements on the connection thread, the sends on a pool). The session
holds what every strategy shares: the deliveries ready, the tags not settled yet, the settler, the acks.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Mapping
from typing import Final, Protocol

import pika
from pika.spec import Basic

from services.consumer import acks
from services.consumer.broker import Route
from services.consumer.connection import Channel, Connection
from services.consumer.messages import Delivery
from services.consumer.outcomes import Outcome, Requeue
from services.consumer.settle_channel import SettleChannel
from services.consumer.settler import NO_COUNTERS, Counters, Settler
from services.core import sdnotify

log = logging.getLogger(__name__)

IDLE_TICK: Final = 0.25  # seconds between stop-flag checks while the I/O loop waits


class Strategy(Protocol):
    """How a consumer works on what is ready. Every method runs on the connection thread."""

    def start(self, session: Session) -> None:
        """The session is consuming: its channel and settler are open (once per session)."""

    def arrived(self) -> None:
        """Deliveries were added to `session.ready`."""

    def unstarted(self) -> list[Delivery]:
        """Stopping: cancel the work not started yet; the deliveries it held (returned to the queue)."""

    def busy(self) -> bool:
        """Work is running or waiting to be settled (the stopping session waits for it)."""

    def abandon(self) -> None:
        """After a connection loss: drop the work not started; running work finishes unsettled."""

    def describe(self) -> Mapping[str, object]:
        """What the "consuming" log line says of the strategy."""


class Started:
    """What every strategy does with `start`: keep its session (the base of the runtime's strategies)."""

    _session: Session | None = None

    def start(self, session: Session) -> None:
        self._session = session

    @property
    def _s(self) -> Session:
        assert self._session is not None, "not started"
        return self._session


class Session:
    """One connection's consumer. `run` returns after `stopping` is set and every message taken is settled or
    returned; it raises pika's errors when the connection is lost (the caller, services/core/amqp.py `consume`,
    reconnects with a new session and calls `abandon` on this one)."""

    def __init__(self, connection: Connection, route: Route, strategy: Strategy, stopping: threading.Event, *,
                 prefetch: int, park_ms: int, counters: Counters = NO_COUNTERS) -> None:
        self.conn = connection
        self.route = route
        self.stopping = stopping
        self._strategy = strategy
        self._prefetch = prefetch
        self._park_ms = park_ms
        self._counters = counters
        # Touched by the connection thread only:
        self.ready: deque[Delivery] = deque()  # delivered, not handed to the strategy's work yet
        self._unsettled: dict[int, None] = {}  # every tag not acked or nacked yet, in delivery order
        self._done: set[int] = set()  # settled, to be acked (acks.py)
        self._channel: Channel | None = None
        self._settler: Settler | None = None

    @property
    def channel(self) -> Channel:
        assert self._channel is not None, "the session is not consuming"
        return self._channel

    @property
    def settler(self) -> Settler:
        assert self._settler is not None, "the session is not consuming"
        return self._settler

    def run(self) -> None:
        channel = self._channel = self.conn.channel()
        self.route.declare(channel)
        channel.basic_qos(prefetch_count=self._prefetch)
        self._settler = Settler(SettleChannel(self.conn), self.route, self._park_ms, self._counters)
        self._strategy.start(self)
        tag = channel.basic_consume(self.route.queue, self._on_message, auto_ack=False)
        log.info("consuming", extra={"queue": self.route.queue, "prefetch": self._prefetch,
                                     **self._strategy.describe()})
        sdnotify.ready(f"consuming {self.route.queue}")
        while not self.stopping.is_set():
            self.conn.process_data_events(time_limit=IDLE_TICK)
        channel.basic_cancel(tag)  # undispatched deliveries are returned to the queue by pika
        self._return_unstarted()
        while self._strategy.busy():
            self.conn.process_data_events(time_limit=IDLE_TICK)
        self.flush(hold=0)
        log.info("stopped consuming")

    def _on_message(self, channel: Channel, method: Basic.Deliver, props: pika.BasicProperties,
                    body: bytes) -> None:
        self._unsettled[method.delivery_tag] = None
        self.ready.append(Delivery.of(method.delivery_tag, props, body))
        self._strategy.arrived()

    def _return_unstarted(self) -> None:
        """Stopping: every message not being worked on goes back to the queue as it was."""
        returned = [*self.ready, *self._strategy.unstarted()]
        self.ready.clear()
        for delivery in sorted(returned, key=lambda d: d.tag):
            self.nack(delivery.tag)

    def hand_back(self, settle: Callable[[], None]) -> None:
        """From a worker thread: run `settle` on the connection thread."""
        try:
            self.conn.add_callback_threadsafe(settle)
        except Exception as exc:  # the broker redelivers them
            log.warning("cannot settle, connection lost", extra={"error": repr(exc)})

    def settle(self, delivery: Delivery, outcome: Outcome, context: Mapping[str, object]) -> None:
        """A delivery of one message, settled by its outcome: its copy published, then acked (at the next
        `flush`); returned to the queue if it is to be requeued or its copy was refused."""
        if isinstance(outcome, Requeue) or not self.settler.publish(outcome, delivery.body, delivery.props, context):
            self.nack(delivery.tag)
        else:
            self.acked(delivery.tag)

    def acked(self, tag: int) -> None:
        """Settled: acked at the next `flush`."""
        self._done.add(tag)

    def nack(self, tag: int) -> None:
        """Back to the queue as it was, now."""
        self.channel.basic_nack(tag, requeue=True)
        del self._unsettled[tag]

    def flush(self, hold: int) -> None:
        """Ack what is settled, in as few frames as may be (acks.py; up to `hold` held behind a slow one)."""
        for tag, multiple in acks.frames(self._unsettled, self._done, hold):
            self.channel.basic_ack(tag, multiple=multiple)
            for settled in self._through(tag) if multiple else [tag]:
                del self._unsettled[settled]
                self._done.discard(settled)

    def _through(self, tag: int) -> list[int]:
        """The unsettled tags up to `tag`, a multiple ack's (all of them finished: acks.frames)."""
        through = []
        for unsettled in self._unsettled:
            if unsettled > tag:
                break
            through.append(unsettled)
        return through

    def abandon(self) -> None:
        """After a connection loss: drop what is not started (the broker redelivers it); running work finishes."""
        self._strategy.abandon()
        self.ready.clear()
        self._unsettled.clear()
        self._done.clear()
