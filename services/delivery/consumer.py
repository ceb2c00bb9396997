"""Consume one channel's delivery queue on one broker connection, in batches (docs/adr/0082).

The connection thread takes every message that is ready (up to twice WALFEED_DELIVERY_CONCURRENCY admitted and not
recorded yet), reads their deliveries and takes their tries from the targets' rates in one statement
(`Processor.admit`), and hands each try to the pool (WALFEED_DELIVERY_CONCURRENCY threads: sends in flight, as the
bare client of bench/delivery_throughput.py; the other half of the window waits for a thread, so a thread that
finishes starts the next send at once instead of waiting for the statements). A thread that finishes queues its
result and wakes the connection thread (once for all those finished meanwhile), which records the outcomes in one
statement (`Processor.conclude`), then publishes the retry hops and dead letters and acks. So each send waits only
for its own receiver (a hanging one holds one thread for its own timeout), and the statements cost one round trip
per batch, not two per delivery.

pika's BlockingConnection is not thread-safe: every channel operation (publish, ack, nack) stays on the connection
thread. A retry hop or dead letter is published on a confirming channel and the original acked only after the
broker's confirm (ADR 0020).
"""

from __future__ import annotations

import functools
import logging
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Final

import pika
import pika.exceptions
from pika.adapters.blocking_connection import BlockingChannel
from pika.spec import Basic

from services.core import acks, queues
from services.core.settle_channel import SettleChannel
from services.core.topology import DELIVERY_CHANNELS, DELIVERY_RETRY_DELAYS_MS, Topology
from services.delivery import broker, metrics, processing, route

log = logging.getLogger(__name__)

_IDLE_TICK: Final = 0.25  # seconds between stop-flag checks while the I/O loop waits
_PARK_MS: Final = next(d for d in DELIVERY_RETRY_DELAYS_MS if d >= 60_000)  # a refused dead letter waits ~1 min


@dataclass(frozen=True, slots=True)
class Message:
    tag: int
    props: pika.BasicProperties
    body: bytes


class Session:
    """One connection's consumer. `run` returns after `stopping` is set and every message taken is settled or
    returned; it raises pika's errors when the connection is lost (the caller reconnects)."""

    def __init__(self, connection: pika.BlockingConnection, topology: Topology, name: str,
                 processor: processing.Processor, pool: ThreadPoolExecutor, concurrency: int, dead_max_length: int,
                 stopping: threading.Event, queue_type: str = queues.CLASSIC) -> None:
        self._conn = connection
        self._topology = topology
        self._name = name
        self._processor = processor
        self._pool = pool
        self._concurrency = concurrency
        self._dead_max_length = dead_max_length
        self._queue_type = queue_type
        self._stopping = stopping
        # Touched by the connection thread only:
        self._ready: deque[Message] = deque()  # delivered, not admitted yet
        # Admitted, not recorded yet: at most `concurrency` sending on the pool's threads, as many again admitted
        # ahead, so a thread that finishes takes the next at once instead of waiting for the statements.
        self._running: dict[int, Future[None]] = {}
        self._window = 2 * concurrency
        self._unsettled: dict[int, None] = {}  # every tag not acked or nacked yet, in delivery order
        self._done: set[int] = set()  # finished, to be acked (acks.py)
        self._pump_scheduled = False
        # Filled by the pool threads, taken by the connection thread:
        self._lock = threading.Lock()
        self._finished: list[tuple[Message, processing.Tried]] = []
        self._wake_pending = False

    def run(self) -> None:
        channel = self._conn.channel()
        # Every channel's queues, not only this one's: the relay holds its WAL position on an event no queue takes
        # (ADR 0012), so a delivery.email event must have a queue even where no email worker runs yet.
        for name in DELIVERY_CHANNELS:
            broker.declare(channel, self._topology, name, self._dead_max_length, self._queue_type)
        channel.basic_qos(prefetch_count=self._concurrency * 4)  # the next batch is here when a send finishes
        publisher = SettleChannel(self._conn)
        pump = functools.partial(self._pump, channel, publisher)
        queue = self._topology.delivery_queue(self._name)
        tag = channel.basic_consume(queue, functools.partial(self._on_message, pump), auto_ack=False)
        log.info("consuming", extra={"queue": queue, "concurrency": self._concurrency})
        while not self._stopping.is_set():
            self._conn.process_data_events(time_limit=_IDLE_TICK)
        channel.basic_cancel(tag)
        for message in self._ready:  # not started: back to the queue as they were
            self._nack(channel, message.tag)
        self._ready.clear()
        for started in [tag for tag, task in self._running.items() if task.cancel()]:  # admitted, not sending
            del self._running[started]
            self._nack(channel, started)
        while self._running:
            self._conn.process_data_events(time_limit=_IDLE_TICK)
        self._flush_acks(channel, hold=0)
        log.info("stopped consuming")

    def _on_message(self, pump: Callable[[], None], channel: BlockingChannel, method: Basic.Deliver,
                    props: pika.BasicProperties, body: bytes) -> None:
        self._unsettled[method.delivery_tag] = None
        self._ready.append(Message(method.delivery_tag, props, body))
        self._schedule(pump)

    def _schedule(self, pump: Callable[[], None]) -> None:
        """One pump after the messages and results that arrive in this round of the I/O loop: one batch for all."""
        if not self._pump_scheduled:
            self._pump_scheduled = True
            self._conn.call_later(0, pump)

    def _pump(self, channel: BlockingChannel, publisher: SettleChannel) -> None:
        """Connection thread: admit and start what is ready, then record and settle the finished sends (the pool
        threads meanwhile work on what was admitted ahead)."""
        self._pump_scheduled = False
        with self._lock:
            finished, self._finished = self._finished, []
            self._wake_pending = False
        free = self._window - (len(self._running) - len(finished))
        if free > 0 and self._ready and not self._stopping.is_set():
            batch = [self._ready.popleft() for _ in range(min(free, len(self._ready)))]
            wake = functools.partial(self._schedule, functools.partial(self._pump, channel, publisher))
            for message, admitted in zip(batch, self._admitted(batch), strict=True):
                if isinstance(admitted, processing.Attempt):
                    self._running[message.tag] = self._pool.submit(self._send, message, admitted, wake)
                else:
                    self._settle(channel, publisher, message, admitted)
        if finished:
            for (message, _), outcome in zip(finished, self._concluded([t for _, t in finished]), strict=True):
                del self._running[message.tag]
                self._settle(channel, publisher, message, outcome)
        self._flush_acks(channel, self._window)  # held behind a slow one: up to a window

    def _admitted(self, batch: list[Message]) -> list[processing.Outcome | processing.Attempt]:
        try:
            return self._processor.admit([(m.body, m.props.headers) for m in batch])
        except Exception:  # the processor settles its own failures; this is a bug in it: return the messages
            log.exception("admitting a batch failed, returning its messages", extra={"messages": len(batch)})
            return [processing.REQUEUE] * len(batch)

    def _concluded(self, tried: list[processing.Tried]) -> list[processing.Outcome]:
        try:
            return self._processor.conclude(tried)
        except Exception:  # a bug in the processor: the messages come back, their deliveries are sent again
            log.exception("concluding a batch failed, returning its messages", extra={"messages": len(tried)})
            return [processing.REQUEUE] * len(tried)

    def _send(self, message: Message, attempt: processing.Attempt, wake: Callable[[], None]) -> None:
        """Pool thread: the try, then its result queued for the connection thread, woken once for all queued."""
        tried = self._processor.send(attempt)
        with self._lock:
            self._finished.append((message, tried))
            first, self._wake_pending = not self._wake_pending, True
        if first:
            try:
                self._conn.add_callback_threadsafe(wake)
            except Exception as exc:  # connection gone: the broker redelivers
                log.warning("cannot settle, connection lost", extra={"error": repr(exc)})

    def _settle(self, channel: BlockingChannel, publisher: SettleChannel, message: Message,
                outcome: processing.Outcome) -> None:
        if isinstance(outcome, processing.Requeue) or not self._publish(publisher, message, outcome):
            self._nack(channel, message.tag)
        else:
            self._done.add(message.tag)

    def _nack(self, channel: BlockingChannel, tag: int) -> None:
        channel.basic_nack(tag, requeue=True)
        del self._unsettled[tag]

    def _flush_acks(self, channel: BlockingChannel, hold: int) -> None:
        for tag, multiple in acks.frames(self._unsettled, self._done, hold):
            channel.basic_ack(tag, multiple=multiple)
            for settled in ([t for t in self._unsettled if t <= tag] if multiple else [tag]):
                del self._unsettled[settled]
                self._done.discard(settled)

    def _publish(self, publisher: SettleChannel, message: Message, outcome: processing.Outcome) -> bool:
        """Publish the hop or dead letter, confirmed; False if the broker refused it (the original is requeued)."""
        context = {"message_id": message.props.message_id}
        try:
            if isinstance(outcome, processing.Hop):
                broker.publish_hop(publisher, self._topology, self._name, outcome.delay_ms, outcome.headers,
                                   message.body, message.props)
            elif isinstance(outcome, processing.DeadLetter):
                log.error("dead-lettered", extra={**context, "reason": outcome.reason, "attempts": outcome.attempts})
                metrics.DEAD.labels(self._name).inc()
                self._publish_dead(publisher, message, outcome)
        except (pika.exceptions.NackError, pika.exceptions.UnroutableError) as exc:
            log.error("publish refused, requeueing", extra={**context, "error": repr(exc)})
            return False
        return True

    def _publish_dead(self, publisher: SettleChannel, message: Message, dead: processing.DeadLetter) -> None:
        try:
            broker.publish_dead(publisher, self._topology, self._name, dead.reason, dead.attempts, message.body,
                                message.props)
        except pika.exceptions.NackError:  # full (reject-publish): park it, never drop it
            log.error("dead queue full, dead letter parked in a retry queue", extra={"delay_ms": _PARK_MS})
            headers = route.copy_headers(message.props.headers, **{route.DEAD_HEADER: dead.reason,
                                                                   route.ATTEMPT_HEADER: dead.attempts})
            broker.publish_hop(publisher, self._topology, self._name, _PARK_MS, headers, message.body, message.props)

    def abandon(self) -> None:
        """After a connection loss: drop what is not started (the broker redelivers it); running ones finish."""
        for task in self._running.values():
            task.cancel()
        self._running.clear()
        self._ready.clear()
        self._unsettled.clear()
        self._done.clear()
        with self._lock:
            self._finished.clear()
