"""RabbitMQ adapter of the runtime: where a consumer's copies go (`Route`), the queues of a consumer of the events
exchange (`EventQueues`: the fan-out worker's, the notifier's, the next one's) and their declaration, and the
properties of a copy."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, NamedTuple, Protocol

import pika

from services.consumer.connection import Channel
from services.core import queues as queue_args
from services.core.amqp import EVENTS_EXCHANGE
from services.core.topology import ConsumerQueues

# Dead letters kept before the dead queue refuses more (reject-publish: the consumer's confirm is a nack, and it
# parks the message in the retry queue instead of losing it). Far above what an operator should let pile up: the
# alert rule in deploy/prometheus/alerts.yml fires on the first dead letter.
DEAD_MAX_LENGTH: Final = 100_000


class Destination(NamedTuple):
    exchange: str
    routing_key: str
    expiration: str | None = None  # a per-message TTL, for a retry queue without one of its own


class Route(Protocol):
    """A consumer's queues as the runtime uses them: declared on each connection, consumed, and published to."""

    @property
    def queue(self) -> str:
        """The work queue consumed."""

    def declare(self, channel: Channel) -> None: ...

    def retry(self, delay_ms: int) -> Destination:
        """Where a copy waits `delay_ms` before it comes back to the work queue."""

    def dead(self) -> Destination: ...

    def work(self) -> Destination:
        """Straight back into the work queue (a large post of a group, to be worked on alone)."""


def dead_queue_arguments(max_length: int = DEAD_MAX_LENGTH,
                         queue_type: str = queue_args.CLASSIC) -> dict[str, object]:
    return queue_args.dead_queue(queue_type, max_length)


def declare(channel: Channel, queues: ConsumerQueues, dead_max_length: int = DEAD_MAX_LENGTH,
            queue_type: str = queue_args.CLASSIC) -> None:
    """A consumer's queues (docs/adr/0020) and its settle exchange, of `queue_type` (services/core/queues.py).
    Durable; the retry queue dead-letters expired copies back to the work queue; the dead queue is bounded and
    refuses publishes when full (never drops what it holds). The work queue is bound on the grouped exchange
    (docs/adr/0115) and unbound from the events exchange, where walfeed's queues were bound before: bound on both
    it would get every event twice. Bound first, unbound then: an event published between the two is a duplicate,
    never a loss."""
    channel.exchange_declare(queues.events_exchange, **EVENTS_EXCHANGE)
    channel.exchange_declare(queues.source, **EVENTS_EXCHANGE)
    channel.exchange_declare(queues.settle_exchange, exchange_type="direct", durable=True)
    channel.queue_declare(queues.queue, durable=True,
                          arguments=queue_args.work_queue(queue_type, queues.settle_exchange, queues.dead_queue))
    for key in queues.bindings:
        channel.queue_bind(queues.queue, queues.source, routing_key=key)
    for key in queues.bindings:
        channel.queue_unbind(queues.queue, queues.events_exchange, routing_key=key)
    channel.queue_declare(queues.retry_queue, durable=True,
                          arguments=queue_args.retry_queue(queue_type, queues.settle_exchange, queues.queue))
    channel.queue_declare(queues.dead_queue, durable=True,
                          arguments=dead_queue_arguments(dead_max_length, queue_type))
    for queue in queues.queues():
        channel.queue_bind(queue, queues.settle_exchange, routing_key=queue)


@dataclass(frozen=True, slots=True)
class EventQueues:
    """The Route of a consumer of the events exchange: its work, retry and dead queues (services/core/topology.py
    ConsumerQueues); a retry copy waits its own TTL in the one retry queue. `also` declares what else the consumer
    needs on each connection before it consumes (the notifier: the delivery queues it writes events for)."""

    queues: ConsumerQueues
    dead_max_length: int = DEAD_MAX_LENGTH
    queue_type: str = queue_args.CLASSIC
    also: Callable[[Channel], None] | None = None

    @property
    def queue(self) -> str:
        return self.queues.queue

    def declare(self, channel: Channel) -> None:
        if self.also is not None:
            self.also(channel)
        declare(channel, self.queues, self.dead_max_length, self.queue_type)

    def retry(self, delay_ms: int) -> Destination:
        return Destination(self.queues.settle_exchange, self.queues.retry_queue, str(delay_ms))

    def dead(self) -> Destination:
        return Destination(self.queues.settle_exchange, self.queues.dead_queue)

    def work(self) -> Destination:
        return Destination(self.queues.settle_exchange, self.queues.queue)


def copy_properties(props: pika.BasicProperties, headers: dict[str, object],
                    expiration: str | None = None) -> pika.BasicProperties:
    """A persistent copy of a message's properties with other headers (and a TTL of its own)."""
    return pika.BasicProperties(
        message_id=props.message_id, type=props.type, content_type=props.content_type,
        timestamp=props.timestamp, delivery_mode=pika.DeliveryMode.Persistent, headers=headers,
        expiration=expiration)
