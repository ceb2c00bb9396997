"""Consume a queue of the events exchange (the fan-out's, or the notifier's) on one broker connection: batches on
a pool of threads, large fan-outs on another.

pika's BlockingConnection is not thread-safe and only services heartbeats while this thread runs its I/O loop, so
the database work runs in other threads and every channel operation (publish, ack, nack) is handed back to the
connection thread with `add_callback_threadsafe` (pika's basic_consumer_threaded example).

Batching takes what is there: deliveries wait in `ready` only while every batch thread is busy, and a free thread
takes all of them (up to the batch size, in events) at once. No timer waits for a batch to fill (docs/adr/0024).

A delivery may hold several events of one type (a group, docs/adr/0095): each event is a `Part`, applied, retried
and dead-lettered as if it were a message of its own; the delivery is acked once all its parts are settled.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from typing import Protocol

import pika
import pika.exceptions
from pika.adapters.blocking_connection import BlockingChannel
from pika.spec import Basic

from services.core import acks, queues, sdnotify, tracecontext, tracing
from services.core.events import GROUP_CONTENT_TYPE, Event, MalformedEvent
from services.core.settle_channel import SettleChannel
from services.core.topology import ConsumerQueues
from services.worker import broker, metrics, policy
from services.worker.processing import Message, Result

log = logging.getLogger(__name__)

_IDLE_TICK = 0.25  # seconds between stop-flag checks while the I/O loop waits


class Work(Protocol):
    """What the consumer hands messages to (processing.Processor)."""

    def batch(self, messages: Sequence[Message]) -> list[Result]: ...

    def large(self, message: Message, event: Event) -> Result: ...


@dataclass(frozen=True, slots=True)
class Part:
    """One event of a delivery: the message it would be on its own (`message`), and the delivery's properties."""

    message: Message
    delivery_props: pika.BasicProperties
    alone: bool  # the delivery is this message as it came (one event, or a group too malformed to split)

    @property
    def props(self) -> pika.BasicProperties:
        """Its properties as a message of its own: for its retry copy or dead letter, and its process span."""
        return self.delivery_props if self.alone else broker.part_properties(self.delivery_props, self.message)

    def received(self, result: Result) -> tracing.Received:
        """What the process span says of this event (its creation context is in its headers)."""
        props = self.props
        return tracing.Received(self.message.headers, props.message_id, props.type,
                                type(result.outcome).__name__.lower())


@dataclass(frozen=True, slots=True)
class Delivery:
    tag: int
    parts: list[Part]  # one event each: the message itself, or the events of a group (never empty)

    @classmethod
    def of(cls, tag: int, props: pika.BasicProperties, body: bytes) -> Delivery:
        if props.content_type != GROUP_CONTENT_TYPE:
            return cls(tag, [Part(Message(body, props.headers), props, alone=True)])
        try:
            messages = broker.split(body, props.headers)
        except MalformedEvent as exc:  # dead-lettered as it came, with the reason
            return cls(tag, [Part(Message(body, props.headers, refused=str(exc)), props, alone=True)])
        return cls(tag, [Part(m, props, alone=False) for m in messages])


@dataclass(frozen=True, slots=True)
class Limits:
    batch_size: int  # most events applied in one transaction (a delivery's events are never split)
    batches: int  # batch threads
    prefetch: int  # unacked messages the broker hands this process
    park_ms: int = 60_000  # a refused dead letter's wait in the retry queue
    dead_max_length: int = broker.DEAD_MAX_LENGTH
    queue_type: str = queues.CLASSIC  # WALFEED_AMQP_QUEUE_TYPE (services/core/queues.py)


class Session:
    """One connection's consumer. `run` returns after `stopping` is set and every message taken is settled or
    returned; it raises pika's errors when the connection is lost (the caller reconnects). main.run hands it a
    connection and thread pools; unit tests hand it services/worker/testing.py's stand-ins."""

    def __init__(self, connection: pika.BlockingConnection, queues: ConsumerQueues, processor: Work,
                 batches: Executor, large: Executor, limits: Limits,
                 stopping: threading.Event, traces: tracing.Tracing = tracing.DISABLED) -> None:
        self._conn = connection
        self._traces = traces  # a process span per batch when tracing (docs/adr/0072)
        self._queues = queues
        self._processor = processor
        self._batches = batches
        self._large = large
        self._limits = limits
        self._stopping = stopping
        # Touched by the connection thread only:
        self._ready: deque[Delivery] = deque()  # delivered, waiting for a free batch thread
        self._unsettled: dict[int, None] = {}  # every tag not acked or nacked yet, in delivery order
        # Batches and large fan-outs not settled yet, by the first delivery tag they hold (a tag is in one at a time).
        self._tasks: dict[int, tuple[Future[None], list[Delivery]]] = {}
        self._running_batches = 0

    def run(self) -> None:
        channel = self._conn.channel()
        broker.declare(channel, self._queues, self._limits.dead_max_length, self._limits.queue_type)
        channel.basic_qos(prefetch_count=self._limits.prefetch)
        publisher = SettleChannel(self._conn)
        on_message = functools.partial(self._on_message, publisher)
        tag = channel.basic_consume(self._queues.queue, on_message, auto_ack=False)
        log.info("consuming", extra={"queue": self._queues.queue, "prefetch": self._limits.prefetch,
                                     "batch_size": self._limits.batch_size})
        sdnotify.ready(f"consuming {self._queues.queue}")
        while not self._stopping.is_set():
            self._conn.process_data_events(time_limit=_IDLE_TICK)
        channel.basic_cancel(tag)  # undispatched deliveries are returned to the queue by pika
        self._return_unstarted(channel)
        while self._tasks:
            self._conn.process_data_events(time_limit=_IDLE_TICK)
        log.info("stopped consuming")

    def _on_message(self, publisher: SettleChannel, channel: BlockingChannel, method: Basic.Deliver,
                    props: pika.BasicProperties, body: bytes) -> None:
        self._unsettled[method.delivery_tag] = None
        self._ready.append(Delivery.of(method.delivery_tag, props, body))
        self._dispatch(channel, publisher)

    def _dispatch(self, channel: BlockingChannel, publisher: SettleChannel) -> None:
        """Hand what is ready to the free batch threads, at most a batch of events each (a delivery at least)."""
        ready, size = self._ready, self._limits.batch_size
        while ready and self._running_batches < self._limits.batches and not self._stopping.is_set():
            batch = [ready.popleft()]
            events = len(batch[0].parts)
            while ready and events + len(ready[0].parts) <= size:
                events += len(ready[0].parts)
                batch.append(ready.popleft())
            self._running_batches += 1
            self._start(self._batches.submit(self._process_batch, channel, publisher, batch), batch)

    def _start(self, task: Future[None], deliveries: list[Delivery]) -> None:
        self._tasks[deliveries[0].tag] = (task, deliveries)

    def _process_batch(self, channel: BlockingChannel, publisher: SettleChannel, batch: list[Delivery]) -> None:
        """Batch thread: the database work, then the settlement handed to the connection thread."""
        started = time.monotonic()
        parts = [p for d in batch for p in d.parts]
        try:
            results = self._processor.batch([p.message for p in parts])
        except Exception:  # a bug of ours: give the messages back
            log.exception("batch processing failed, returning its messages", extra={"messages": len(batch)})
            results = [_returned(p) for p in parts]
        if self._traces.enabled:
            received = [p.received(r) for p, r in zip(parts, results, strict=True)]
            self._traces.processed(self._queues.queue, received, started, time.monotonic())
        self._hand_back(functools.partial(self._settle_batch, channel, publisher, batch, results))

    def _process_large(self, channel: BlockingChannel, publisher: SettleChannel, held: list[Delivery],
                       result: Result) -> None:
        """Large fan-out thread: one post's audience in chunks, then its settlement."""
        assert result.event is not None
        part = held[0].parts[0]
        started = time.monotonic()
        try:
            done = self._processor.large(part.message, result.event)
        except Exception:  # as in _process_batch
            log.exception("large fan-out failed, returning its message",
                          extra={"event_id": result.event_id, "trace_id": tracecontext.trace_id(part.message.headers)})
            done = _returned(part)
        if self._traces.enabled:
            self._traces.processed(self._queues.queue, [part.received(done)], started, time.monotonic())
        self._hand_back(functools.partial(self._settle, channel, publisher, held, [done]))

    def _hand_back(self, settle: functools.partial[None]) -> None:
        try:
            self._conn.add_callback_threadsafe(settle)
        except Exception as exc:  # the broker redelivers them
            log.warning("cannot settle, connection lost", extra={"error": repr(exc)})

    def _settle_batch(self, channel: BlockingChannel, publisher: SettleChannel, batch: list[Delivery],
                      results: list[Result]) -> None:
        self._running_batches -= 1
        metrics.BATCH_SIZE.observe(sum(len(d.parts) for d in batch))  # events, as the batch size counts them
        self._settle(channel, publisher, batch, results)
        self._dispatch(channel, publisher)

    def _settle(self, channel: BlockingChannel, publisher: SettleChannel, deliveries: Sequence[Delivery],
                results: Sequence[Result]) -> None:
        """Connection thread: publish retry copies and dead letters (confirmed), then ack the rest together;
        messages with a large audience go on to the large fan-out threads. `results`: one per part, in order."""
        del self._tasks[deliveries[0].tag]
        acked: set[int] = set()
        settled: list[Result] = []
        at = 0
        for delivery in deliveries:
            mine, at = results[at:at + len(delivery.parts)], at + len(delivery.parts)
            if len(mine) == 1 and isinstance(mine[0].outcome, policy.Large) and not self._stopping.is_set():
                held = [delivery]
                self._start(self._large.submit(self._process_large, channel, publisher, held, mine[0]), held)
                continue
            if not self._settle_parts(publisher, delivery, mine):
                channel.basic_nack(delivery.tag, requeue=True)
                del self._unsettled[delivery.tag]
                continue
            acked.add(delivery.tag)
            settled.extend(r for r in mine if not isinstance(r.outcome, policy.Large))  # counted when fanned out
        metrics.observe(settled)
        for tag, multiple in acks.frames(self._unsettled, acked):
            channel.basic_ack(tag, multiple=multiple)
        for tag in acked:
            del self._unsettled[tag]

    def _settle_parts(self, publisher: SettleChannel, delivery: Delivery, results: Sequence[Result]) -> bool:
        """Whether the delivery may be acked: every part's retry copy or dead letter was taken by the broker, and
        the large post of a group went back to the work queue alone (to be fanned out as a message of its own).
        False: return it to the queue whole (its parts applied meanwhile are applied again, idempotently)."""
        if any(isinstance(r.outcome, policy.Requeue) for r in results):
            return False
        if len(results) == 1 and isinstance(results[0].outcome, policy.Large):
            return False  # stopping (`_settle` hands it to a large fan-out thread otherwise): returned as it came
        pairs = list(zip(delivery.parts, results, strict=True))
        # Retry copies and dead letters first: a large post's copy goes last, once nothing can send the group back
        # (a group returned after its copy went would copy it again on every return).
        return all(self._publish_outcome(publisher, part, result) for part, result in pairs) and all(
            self._publish_alone(publisher, part, result) for part, result in pairs
            if isinstance(result.outcome, policy.Large))

    def _publish_alone(self, publisher: SettleChannel, part: Part, result: Result) -> bool:
        try:
            broker.publish_alone(publisher, self._queues, part.message.body, part.props)
        except (pika.exceptions.NackError, pika.exceptions.UnroutableError) as exc:
            log.error("large post of a group not taken back alone, requeueing the group", extra={
                "event_id": result.event_id, "trace_id": tracecontext.trace_id(part.message.headers),
                "error": repr(exc)})
            return False
        return True

    def _publish_outcome(self, publisher: SettleChannel, part: Part, result: Result) -> bool:
        """Publish the retry copy or dead letter; False if the broker refused it (the original is requeued)."""
        outcome = result.outcome
        if not isinstance(outcome, policy.Retry | policy.Dead):
            return True
        props = part.props
        context = {"event_id": result.event_id or props.message_id, "type": result.event_type,
                   "trace_id": tracecontext.trace_id(part.message.headers)}
        try:
            broker.publish_outcome(publisher, self._queues, outcome, part.message.body, props)
        except pika.exceptions.NackError as exc:
            if not isinstance(outcome, policy.Dead):
                log.error("retry publish refused, requeueing", extra={**context, "error": repr(exc)})
                return False
            return self._park(publisher, part, outcome, context)
        except pika.exceptions.UnroutableError as exc:
            log.error("retry/dead publish unroutable, requeueing", extra={**context, "error": repr(exc)})
            return False
        if isinstance(outcome, policy.Retry):
            log.info("retry scheduled", extra={**context, "attempt": outcome.attempt, "delay_ms": outcome.delay_ms,
                                               "reason": outcome.reason})
        else:
            log.error("dead-lettered", extra={**context, "reason": outcome.reason, "attempts": outcome.attempts})
        return True

    def _park(self, publisher: SettleChannel, part: Part, dead: policy.Dead, context: dict[str, object]) -> bool:
        """The dead queue refused the letter (full, reject-publish): keep the message in the retry queue for a while
        instead of dropping it or spinning on it."""
        log.error("dead queue full, message parked in the retry queue",
                  extra={**context, "reason": dead.reason, "delay_ms": self._limits.park_ms})
        metrics.DEAD_QUEUE_FULL.inc()
        try:
            broker.park(publisher, self._queues, dead, self._limits.park_ms, part.message.body, part.props)
        except (pika.exceptions.UnroutableError, pika.exceptions.NackError) as exc:
            log.error("parking refused, requeueing", extra={**context, "error": repr(exc)})
            return False
        return True

    def _return_unstarted(self, channel: BlockingChannel) -> None:
        """Stopping: every message not being worked on goes back to the queue as it was."""
        returned = list(self._ready)
        self._ready.clear()
        for first, (task, held) in list(self._tasks.items()):
            if task.cancel():
                del self._tasks[first]
                returned.extend(held)
        for delivery in sorted(returned, key=lambda d: d.tag):
            channel.basic_nack(delivery.tag, requeue=True)
            del self._unsettled[delivery.tag]

    def abandon(self) -> None:
        """After a connection loss: drop tasks not started (the broker redelivers them), let running ones finish."""
        for task, _ in self._tasks.values():
            task.cancel()
        self._tasks.clear()
        self._ready.clear()


def _returned(part: Part) -> Result:
    return Result(policy.REQUEUE, "unknown", part.props.message_id, "returned", 0.0)
