"""RabbitMQ adapter of a consumer of the events exchange (the fan-out worker, the notifier): its queues'
declaration and settling a delivery (retry copy, dead letter, ack)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from datetime import datetime
from typing import Final

import orjson
import pika
from pika.adapters.blocking_connection import BlockingChannel

from services.core import events
from services.core import queues as queue_args
from services.core.amqp import EVENTS_EXCHANGE
from services.core.settle_channel import Publishes
from services.core.topology import ConsumerQueues
from services.core.tracecontext import HEADER as TRACEPARENT
from services.worker import policy
from services.worker.processing import Message

# Dead letters kept before the dead queue refuses more (reject-publish: the worker's confirm is a nack, and it parks
# the message in the retry queue instead of losing it). Far above what an operator should let pile up: the alert
# rule in deploy/prometheus/alerts.yml fires on the first dead letter.
DEAD_MAX_LENGTH: Final = 100_000


def dead_queue_arguments(max_length: int = DEAD_MAX_LENGTH,
                         queue_type: str = queue_args.CLASSIC) -> dict[str, object]:
    return queue_args.dead_queue(queue_type, max_length)


def declare(channel: BlockingChannel, queues: ConsumerQueues, dead_max_length: int = DEAD_MAX_LENGTH,
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


def _copy_properties(props: pika.BasicProperties, headers: dict[str, object],
                     expiration: str | None = None) -> pika.BasicProperties:
    return pika.BasicProperties(
        message_id=props.message_id, type=props.type, content_type=props.content_type,
        timestamp=props.timestamp, delivery_mode=pika.DeliveryMode.Persistent, headers=headers,
        expiration=expiration)


def split(body: bytes, headers: Mapping[str, object] | None) -> list[Message]:
    """The events of a group (docs/events.md "Groups"), each as the message it would be on its own: its body, and
    the group's headers with its own `traceparent` instead of the group's list. Raises MalformedEvent."""
    bodies = events.split_group(body)
    shared = {k: v for k, v in (headers or {}).items() if k != events.TRACEPARENTS_HEADER}
    contexts = (headers or {}).get(events.TRACEPARENTS_HEADER)
    if not isinstance(contexts, list) or len(contexts) != len(bodies):
        contexts = [None] * len(bodies)  # none, or not one per event: the events go on without their contexts
    return [Message(b, {**shared, TRACEPARENT: c} if isinstance(c, str) and c else shared or None)
            for b, c in zip(bodies, contexts, strict=True)]


def part_properties(group: pika.BasicProperties, message: Message) -> pika.BasicProperties:
    """The properties of a group's event as a message of its own (docs/events.md): its id and time, read from its
    body (the group's where it has none), the group's type, and its own headers."""
    try:
        data = orjson.loads(message.body)
        found, occurred = data.get("id"), datetime.fromisoformat(data["occurred_at"])
        timestamp = events.epoch_seconds(occurred) if occurred.tzinfo is not None else group.timestamp
    except (orjson.JSONDecodeError, AttributeError, KeyError, TypeError, ValueError):  # judged malformed alone
        found, timestamp = None, group.timestamp
    return pika.BasicProperties(
        message_id=found if isinstance(found, str) else group.message_id, type=group.type,
        content_type=events.CONTENT_TYPE, timestamp=timestamp, delivery_mode=pika.DeliveryMode.Persistent,
        headers=dict(message.headers) if message.headers else None)


def publish_alone(publisher: Publishes, queues: ConsumerQueues, body: bytes, props: pika.BasicProperties) -> None:
    """Put one event of a group back into the work queue as a message of its own (a large post, fanned out in
    chunks apart from any batch), on a confirming channel; raises if the broker did not take it."""
    alone = _copy_properties(props, policy.copy_headers(props.headers))  # without the broker's dead-letter history
    publisher.basic_publish(queues.settle_exchange, queues.queue, body, alone, mandatory=True)


def park(publisher: Publishes, queues: ConsumerQueues, dead: policy.Dead, delay_ms: int, body: bytes,
         props: pika.BasicProperties) -> None:
    """The dead queue is full: the message waits `delay_ms` in the retry queue and comes back, dead again."""
    publish_outcome(publisher, queues, policy.Retry(dead.attempts, delay_ms, f"dead queue full: {dead.reason}"),
                    body, props)


def publish_outcome(publisher: Publishes, queues: ConsumerQueues, outcome: policy.Retry | policy.Dead,
                    body: bytes, props: pika.BasicProperties) -> None:
    """Publish the retry copy or the dead letter on a confirming channel; raises if the broker did not take it."""
    if isinstance(outcome, policy.Retry):
        headers = policy.copy_headers(props.headers, **{policy.ATTEMPT_HEADER: outcome.attempt,
                                                        policy.REASON_HEADER: outcome.reason})
        queue, out = queues.retry_queue, _copy_properties(props, headers, str(outcome.delay_ms))
    else:
        headers = policy.copy_headers(props.headers, **{policy.REASON_HEADER: outcome.reason,
                                                        policy.ATTEMPTS_HEADER: outcome.attempts,
                                                        policy.DEAD_AT_HEADER: int(time.time())})
        queue, out = queues.dead_queue, _copy_properties(props, headers)
    publisher.basic_publish(queues.settle_exchange, queue, body, out, mandatory=True)
