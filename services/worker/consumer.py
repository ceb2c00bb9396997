"""Consume the fan-out queue on one broker connection with a pool of handler threads.

pika's BlockingConnection is not thread-safe and only services heartbeats while this thread runs its I/O loop, so
the database work runs in handler threads and every channel operation (publish, ack, nack) is handed back to the
connection thread with `add_callback_threadsafe` (pika's basic_consumer_threaded example).
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor

import pika
import pika.exceptions
from pika.adapters.blocking_connection import BlockingChannel
from pika.spec import Basic

from services.core.topology import Topology
from services.worker import broker, metrics, policy
from services.worker.processing import Result

log = logging.getLogger(__name__)

Work = Callable[[bytes, Mapping[str, object] | None], Result]
_IDLE_TICK = 0.25  # seconds between stop-flag checks while the I/O loop waits


class Session:
    """One connection's consumer. `run` returns after `stopping` is set and in-flight messages are settled;
    it raises pika's errors when the connection is lost (the caller reconnects)."""

    def __init__(self, connection: pika.BlockingConnection, topology: Topology, work: Work,
                 executor: ThreadPoolExecutor, prefetch: int, stopping: threading.Event) -> None:
        self._conn = connection
        self._topology = topology
        self._work = work
        self._executor = executor
        self._prefetch = prefetch
        self._stopping = stopping
        self._in_flight: dict[int, Future[None]] = {}  # delivery tag -> handler task; touched by this thread only

    def run(self) -> None:
        channel = self._conn.channel()
        broker.declare(channel, self._topology)
        channel.basic_qos(prefetch_count=self._prefetch)
        publisher = self._conn.channel()
        publisher.confirm_delivery()
        on_message = functools.partial(self._on_message, publisher)
        tag = channel.basic_consume(self._topology.fanout_queue, on_message, auto_ack=False)
        log.info("consuming", extra={"queue": self._topology.fanout_queue, "prefetch": self._prefetch})
        while not self._stopping.is_set():
            self._conn.process_data_events(time_limit=_IDLE_TICK)
        channel.basic_cancel(tag)  # undispatched deliveries are returned to the queue by pika
        self._return_unstarted(channel)
        while self._in_flight:
            self._conn.process_data_events(time_limit=_IDLE_TICK)
        log.info("stopped consuming")

    def _on_message(self, publisher: BlockingChannel, channel: BlockingChannel, method: Basic.Deliver,
                    props: pika.BasicProperties, body: bytes) -> None:
        tag = method.delivery_tag
        self._in_flight[tag] = self._executor.submit(self._process, channel, publisher, tag, props, body)

    def _process(self, channel: BlockingChannel, publisher: BlockingChannel, tag: int,
                 props: pika.BasicProperties, body: bytes) -> None:
        """Handler thread: the database work, then the settlement handed to the connection thread."""
        result = self._work(body, props.headers)
        settle = functools.partial(self._settle, channel, publisher, tag, props, body, result)
        try:
            self._conn.add_callback_threadsafe(settle)
        except Exception as exc:  # connection gone: the broker redelivers, effects are idempotent
            log.warning("cannot settle, connection lost", extra={"event_id": result.event_id, "error": repr(exc)})

    def _settle(self, channel: BlockingChannel, publisher: BlockingChannel, tag: int,
                props: pika.BasicProperties, body: bytes, result: Result) -> None:
        """Connection thread: publish the retry copy or dead letter (confirmed), then ack the original."""
        self._in_flight.pop(tag, None)
        outcome = result.outcome
        context = {"event_id": result.event_id or props.message_id, "type": result.event_type}
        if isinstance(outcome, policy.Requeue):
            channel.basic_nack(tag, requeue=True)
            return
        try:
            if not isinstance(outcome, policy.Ack):
                broker.publish_outcome(publisher, self._topology, outcome, body, props)
        except (pika.exceptions.UnroutableError, pika.exceptions.NackError) as exc:
            log.error("retry/dead publish refused, requeueing", extra={**context, "error": repr(exc)})
            channel.basic_nack(tag, requeue=True)
            return
        channel.basic_ack(tag)
        if isinstance(outcome, policy.Retry):
            log.info("retry scheduled", extra={**context, "attempt": outcome.attempt, "delay_ms": outcome.delay_ms,
                                               "reason": outcome.reason})
        elif isinstance(outcome, policy.Dead):
            log.error("dead-lettered", extra={**context, "reason": outcome.reason, "attempts": outcome.attempts})
        metrics.observe(result)

    def _return_unstarted(self, channel: BlockingChannel) -> None:
        for tag, future in list(self._in_flight.items()):
            if future.cancel():
                del self._in_flight[tag]
                channel.basic_nack(tag, requeue=True)

    def abandon(self) -> None:
        """After a connection loss: drop tasks not started (the broker redelivers them), let running ones finish."""
        for future in self._in_flight.values():
            future.cancel()
        self._in_flight.clear()
