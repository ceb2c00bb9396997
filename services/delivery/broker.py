"""RabbitMQ adapter of the delivery worker: a channel's topology (docs/amqp.md, docs/adr/0081) and the Route the
consumer runtime publishes its copies by (retry hops and dead letters, through the channel's settle exchange)."""

from __future__ import annotations

from dataclasses import dataclass

from services.consumer.broker import Destination
from services.consumer.connection import Channel
from services.core import queues
from services.core.amqp import declare_delivery_queue, declare_events_exchange
from services.core.topology import DELIVERY_CHANNELS, DELIVERY_RETRY_DELAYS_MS, Topology


def declare(channel: Channel, topology: Topology, name: str, dead_max_length: int,
            queue_type: str = queues.CLASSIC) -> None:
    """The work queue bound to `delivery.{name}`, one retry queue per delay (queue-level TTL, dead-lettering back to
    the work queue through the settle exchange) and the bounded dead queue; of `queue_type` (services/core/queues.py).
    Durable."""
    declare_events_exchange(channel, topology)
    settle = topology.delivery_settle_exchange
    channel.exchange_declare(settle, exchange_type="direct", durable=True)
    work = declare_delivery_queue(channel, topology, name, queue_type)
    channel.queue_bind(work, settle, routing_key=work)
    for delay in DELIVERY_RETRY_DELAYS_MS:
        queue = topology.delivery_retry_queue(name, delay)
        channel.queue_declare(queue, durable=True, arguments=queues.retry_queue(queue_type, settle, work, delay))
        channel.queue_bind(queue, settle, routing_key=queue)
    dead = topology.delivery_dead_queue(name)
    channel.queue_declare(dead, durable=True, arguments=queues.dead_queue(queue_type, dead_max_length))
    channel.queue_bind(dead, settle, routing_key=dead)


@dataclass(frozen=True, slots=True)
class DeliveryQueues:
    """The Route of channel `name`'s worker (services/consumer/broker.py): a copy that waits `delay_ms` goes to the
    retry queue of that delay (a delay of DELIVERY_RETRY_DELAYS_MS: route.py chooses it)."""

    topology: Topology
    name: str
    dead_max_length: int
    queue_type: str = queues.CLASSIC

    @property
    def queue(self) -> str:
        return self.topology.delivery_queue(self.name)

    def declare(self, channel: Channel) -> None:
        # Every channel's queues, not only this one's: the relay holds its WAL position on an event no queue takes
        # (ADR 0012), so a delivery.email event must have a queue even where no email worker runs yet.
        for name in DELIVERY_CHANNELS:
            declare(channel, self.topology, name, self.dead_max_length, self.queue_type)

    def retry(self, delay_ms: int) -> Destination:
        return Destination(self.topology.delivery_settle_exchange, self.topology.delivery_retry_queue(self.name,
                                                                                                      delay_ms))

    def dead(self) -> Destination:
        return Destination(self.topology.delivery_settle_exchange, self.topology.delivery_dead_queue(self.name))

    def work(self) -> Destination:
        return Destination(self.topology.delivery_settle_exchange, self.queue)
