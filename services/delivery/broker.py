"""RabbitMQ adapter of the delivery worker: a channel's topology (docs/amqp.md, docs/adr/0081) and the copies it
publishes (retry hops and dead letters) through its own settle exchange."""

from __future__ import annotations

import time

import pika
from pika.adapters.blocking_connection import BlockingChannel

from services.core import queues
from services.core.amqp import declare_delivery_queue, declare_events_exchange
from services.core.settle_channel import Publishes
from services.core.topology import DELIVERY_RETRY_DELAYS_MS, Topology
from services.delivery import route


def declare(channel: BlockingChannel, topology: Topology, name: str, dead_max_length: int,
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


def _properties(props: pika.BasicProperties, headers: dict[str, object]) -> pika.BasicProperties:
    return pika.BasicProperties(message_id=props.message_id, type=props.type, content_type=props.content_type,
                                timestamp=props.timestamp, delivery_mode=pika.DeliveryMode.Persistent,
                                headers=headers)


def publish_hop(publisher: Publishes, topology: Topology, name: str, delay_ms: int,
                headers: dict[str, object], body: bytes, props: pika.BasicProperties) -> None:
    """A copy into the retry queue of `delay_ms`; raises pika's NackError / UnroutableError if not taken."""
    out = _properties(props, route.copy_headers(headers))
    publisher.basic_publish(topology.delivery_settle_exchange, topology.delivery_retry_queue(name, delay_ms), body,
                            out, mandatory=True)


def publish_dead(publisher: Publishes, topology: Topology, name: str, reason: str, attempts: int,
                 body: bytes, props: pika.BasicProperties) -> None:
    headers = route.copy_headers(props.headers, **{route.REASON_HEADER: reason, route.ATTEMPTS_HEADER: attempts,
                                                   route.DEAD_AT_HEADER: int(time.time())})
    headers.pop(route.DEAD_HEADER, None)
    headers.pop(route.DUE_HEADER, None)
    publisher.basic_publish(topology.delivery_settle_exchange, topology.delivery_dead_queue(name), body,
                            _properties(props, headers), mandatory=True)
