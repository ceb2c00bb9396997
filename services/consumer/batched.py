"""The strategy of the consumers of the events exchange (the fan-out worker, the notifier, the next one): batches on
a pool of threads, and (for the fan-out worker) a post whose audience is large on another pool.

Batching takes what is there: deliveries wait in `ready` only while every batch thread is busy, and a free thread
takes all of them (up to the batch size, in events) at once. No timer waits for a batch to fill (docs/adr/0024).
A delivery may hold several events of one type (a group, docs/adr/0095): each event is a `Part`, applied, retried
and dead-lettered as if it were a message of its own; the delivery is acked once all its parts are settled.

A consumer supplies its handler (`Work`, usually services/consumer/processor.py's Processor over its `apply` and
its retry policy) and its Limits, and `session` builds its Session (docs/consumers.md).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from typing import Protocol

import pika.exceptions

from services.consumer import metrics, outcomes
from services.consumer.broker import DEAD_MAX_LENGTH, EventQueues
from services.consumer.connection import Channel, Connection
from services.consumer.messages import Delivery, Message, Part, Result
from services.consumer.retry import RetryPolicy
from services.consumer.session import Session, Started
from services.consumer.settings import ConsumerSettings
from services.consumer.settler import Counters
from services.core import queues, tracecontext, tracing
from services.core.events import Event
from services.core.topology import ConsumerQueues

log = logging.getLogger(__name__)


class Work(Protocol):
    """What the strategy hands messages to (processor.Processor)."""

    def batch(self, messages: Sequence[Message]) -> list[Result]: ...

    def large(self, message: Message, event: Event) -> Result: ...


@dataclass(frozen=True, slots=True)
class Limits:
    batch_size: int  # most events applied in one transaction (a delivery's events are never split)
    batches: int  # batch threads
    prefetch: int  # unacked messages the broker hands this process
    park_ms: int = 60_000  # a refused dead letter's wait in the retry queue
    dead_max_length: int = DEAD_MAX_LENGTH
    queue_type: str = queues.CLASSIC  # WALFEED_AMQP_QUEUE_TYPE (services/core/queues.py)


def limits_of(settings: ConsumerSettings, queue_type: str) -> Limits:
    """The Limits a consumer's settings give (a refused dead letter waits the longest retry delay)."""
    return Limits(settings.batch_size, settings.concurrency, settings.prefetch,
                  park_ms=round(settings.retry_cap * 1000), dead_max_length=settings.dead_max_length,
                  queue_type=queue_type)


def retry_of(settings: ConsumerSettings) -> RetryPolicy:
    return RetryPolicy(settings.max_attempts, settings.retry_base, settings.retry_cap)


def session(connection: Connection, consumer_queues: ConsumerQueues, work: Work, batches: Executor, limits: Limits,
            stopping: threading.Event, traces: tracing.Tracing = tracing.DISABLED, *, large: Executor | None = None,
            also: Callable[[Channel], None] | None = None) -> Session:
    """The Session of a consumer of the events exchange on `consumer_queues`: `work` on the `batches` threads,
    its Large outcomes on the `large` ones (None: it answers none; one would be returned to its queue). `also`:
    what else to declare on each connection (services/consumer/broker.py EventQueues). main.run hands it a
    connection and thread pools; unit tests hand it testkit/broker.py's stand-ins."""
    route = EventQueues(consumer_queues, limits.dead_max_length, limits.queue_type, also)
    return Session(connection, route, Batches(work, batches, large, limits, traces), stopping,
                   prefetch=limits.prefetch, park_ms=limits.park_ms,
                   counters=Counters(dead_queue_full=metrics.DEAD_QUEUE_FULL.inc))


class Batches(Started):
    """The strategy: batches of what is ready on the batch threads, large fan-outs on their own."""

    def __init__(self, work: Work, batches: Executor, large: Executor | None, limits: Limits,
                 traces: tracing.Tracing = tracing.DISABLED) -> None:
        self._work = work
        self._batches = batches
        self._large = large
        self._limits = limits
        self._traces = traces  # a process span per batch when tracing (docs/adr/0072)
        # Touched by the connection thread only. Batches and large fan-outs not settled yet, by the first delivery
        # tag they hold (a tag is in one at a time).
        self._tasks: dict[int, tuple[Future[None], list[Delivery]]] = {}
        self._running_batches = 0

    def describe(self) -> Mapping[str, object]:
        return {"batch_size": self._limits.batch_size}

    def arrived(self) -> None:
        self._dispatch()

    def busy(self) -> bool:
        return bool(self._tasks)

    def unstarted(self) -> list[Delivery]:
        returned = []
        for first, (task, held) in list(self._tasks.items()):
            if task.cancel():
                del self._tasks[first]
                returned.extend(held)
        return returned

    def abandon(self) -> None:
        for task, _ in self._tasks.values():
            task.cancel()
        self._tasks.clear()

    def _dispatch(self) -> None:
        """Hand what is ready to the free batch threads, at most a batch of events each (a delivery at least)."""
        s = self._s
        ready, size = s.ready, self._limits.batch_size
        while ready and self._running_batches < self._limits.batches and not s.stopping.is_set():
            batch = [ready.popleft()]
            events = len(batch[0].parts)
            while ready and events + len(ready[0].parts) <= size:
                events += len(ready[0].parts)
                batch.append(ready.popleft())
            self._running_batches += 1
            self._tasks[batch[0].tag] = (self._batches.submit(self._process_batch, batch), batch)

    def _process_batch(self, batch: list[Delivery]) -> None:
        """Batch thread: the database work, then the settlement handed to the connection thread."""
        started = time.monotonic()
        parts = [p for d in batch for p in d.parts]
        try:
            results = self._work.batch([p.message for p in parts])
        except Exception:  # a bug of ours: give the messages back
            log.exception("batch processing failed, returning its messages", extra={"messages": len(batch)})
            results = [_returned(p) for p in parts]
        if self._traces.enabled:
            received = [p.received(r) for p, r in zip(parts, results, strict=True)]
            self._traces.processed(self._s.route.queue, received, started, time.monotonic())
        self._s.hand_back(functools.partial(self._settle_batch, batch, results))

    def _process_large(self, held: list[Delivery], result: Result) -> None:
        """Large fan-out thread: one post's audience in chunks, then its settlement."""
        assert result.event is not None
        part = held[0].parts[0]
        started = time.monotonic()
        try:
            done = self._work.large(part.message, result.event)
        except Exception:  # as in _process_batch
            log.exception("large fan-out failed, returning its message",
                          extra={"event_id": result.event_id, "trace_id": tracecontext.trace_id(part.message.headers)})
            done = _returned(part)
        if self._traces.enabled:
            self._traces.processed(self._s.route.queue, [part.received(done)], started, time.monotonic())
        self._s.hand_back(functools.partial(self._settle, held, [done]))

    def _settle_batch(self, batch: list[Delivery], results: list[Result]) -> None:
        self._running_batches -= 1
        metrics.BATCH_SIZE.observe(sum(len(d.parts) for d in batch))  # events, as the batch size counts them
        self._settle(batch, results)
        self._dispatch()

    def _settle(self, deliveries: Sequence[Delivery], results: Sequence[Result]) -> None:
        """Connection thread: publish retry copies and dead letters (confirmed), then ack the rest together;
        messages with a large audience go on to the large fan-out threads. `results`: one per part, in order."""
        s = self._s
        del self._tasks[deliveries[0].tag]
        settled: list[Result] = []
        at = 0
        for delivery in deliveries:
            mine, at = results[at:at + len(delivery.parts)], at + len(delivery.parts)
            if (len(mine) == 1 and isinstance(mine[0].outcome, outcomes.Large) and self._large is not None
                    and not s.stopping.is_set()):
                held = [delivery]
                self._tasks[delivery.tag] = (self._large.submit(self._process_large, held, mine[0]), held)
                continue
            if not self._settle_parts(delivery, mine):
                s.nack(delivery.tag)
                continue
            s.acked(delivery.tag)
            settled.extend(r for r in mine if not isinstance(r.outcome, outcomes.Large))  # counted when fanned out
        metrics.observe(settled)
        s.flush(hold=0)

    def _settle_parts(self, delivery: Delivery, results: Sequence[Result]) -> bool:
        """Whether the delivery may be acked: every part's retry copy or dead letter was taken by the broker, and
        the large post of a group went back to the work queue alone (to be fanned out as a message of its own).
        False: return it to the queue whole (its parts applied meanwhile are applied again, idempotently)."""
        if any(isinstance(r.outcome, outcomes.Requeue) for r in results):
            return False
        if len(results) == 1 and isinstance(results[0].outcome, outcomes.Large):
            return False  # stopping (`_settle` hands it to a large fan-out thread otherwise): returned as it came
        pairs = list(zip(delivery.parts, results, strict=True))
        # Retry copies and dead letters first: a large post's copy goes last, once nothing can send the group back
        # (a group returned after its copy went would copy it again on every return).
        return all(self._publish(part, result) for part, result in pairs) and all(
            self._publish_alone(part, result) for part, result in pairs
            if isinstance(result.outcome, outcomes.Large))

    def _publish(self, part: Part, result: Result) -> bool:
        if not isinstance(result.outcome, outcomes.Retry | outcomes.Hop | outcomes.Dead):
            return True  # nothing to publish: no log context to build either (microseconds a message)
        return self._s.settler.publish(result.outcome, part.message.body, part.props, _context(part, result))

    def _publish_alone(self, part: Part, result: Result) -> bool:
        try:
            self._s.settler.publish_alone(part.message.body, part.props)
        except (pika.exceptions.NackError, pika.exceptions.UnroutableError) as exc:
            log.error("large post of a group not taken back alone, requeueing the group", extra={
                "event_id": result.event_id, "trace_id": tracecontext.trace_id(part.message.headers),
                "error": repr(exc)})
            return False
        return True


def _context(part: Part, result: Result) -> dict[str, object]:
    return {"event_id": result.event_id or part.props.message_id, "type": result.event_type,
            "trace_id": tracecontext.trace_id(part.message.headers)}


def _returned(part: Part) -> Result:
    return Result(outcomes.REQUEUE, "unknown", part.props.message_id, "returned", 0.0)
