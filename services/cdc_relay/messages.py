"""The AMQP message of an outbox event (docs/events.md): what the relay and the polling source publish.

`Outgoing` carries an opaque token, handed back to the caller once the broker confirmed the message.
`EventProperties` are its AMQP properties, as pika encodes them.
"""

from __future__ import annotations

from typing import Generic, NamedTuple, TypeVar

import pika

from services.core.events import CONTENT_TYPE, Event, encode, epoch_seconds
from services.core.tracecontext import HEADER as TRACEPARENT

T = TypeVar("T")


class Outgoing(NamedTuple, Generic[T]):
    """One message to publish. Immutable; a NamedTuple, cheaper to build than a frozen dataclass, because one is
    built per event (docs/adr/0015)."""

    token: T
    body: bytes
    message_id: str
    type: str  # the event type, and so the routing key
    timestamp: int
    traceparent: str | None = None  # the event's creation context (its outbox row's), the `traceparent` header


def outgoing(event: Event, token: T, traceparent: str | None = None) -> Outgoing[T]:
    return Outgoing(token=token, body=encode(event), message_id=str(event.id), type=event.type,
                    timestamp=epoch_seconds(event.occurred_at), traceparent=traceparent)


class EventProperties(pika.BasicProperties):  # type: ignore[misc]  # pika is untyped
    """The properties of an event message: persistent, JSON, with its id, type and time, and the `traceparent`
    header when the event has a trace context.

    One is built per message on the relay's hot path: the constant properties are class attributes and `__init__`
    sets the three that vary, instead of BasicProperties' fourteen assignments (docs/adr/0015). `encode()` is
    pika's own and reads the attributes, so the bytes on the wire are the same as BasicProperties(...) with the
    same values would give (tests/unit/test_relay_pika_pin.py).
    """

    content_type = CONTENT_TYPE
    delivery_mode = pika.DeliveryMode.Persistent.value
    content_encoding = headers = priority = correlation_id = reply_to = expiration = None
    user_id = app_id = cluster_id = None

    def __init__(self, message_id: str, type: str, timestamp: int, traceparent: str | None = None) -> None:
        self.message_id, self.type, self.timestamp = message_id, type, timestamp
        if traceparent is not None:
            self.headers = {TRACEPARENT: traceparent}
