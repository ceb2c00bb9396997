"""The AMQP message of an outbox event (docs/events.md): what the relay and the polling source publish.

`Outgoing` carries an opaque token, handed back to the caller once the broker confirmed the message.
`EventProperties` are its AMQP properties, as pika encodes them. A fan-out event goes to two exchanges (routes.py,
docs/adr/0115): `route` says which. The CDC source may merge several events of one type into a group's message on
the grouped exchange (grouping.py, docs/adr/0095): `group_properties` are that message's.
"""

from __future__ import annotations

import struct
from typing import Generic, NamedTuple, TypeVar

import pika

from services.core.events import (
    CONTENT_TYPE,
    GROUP_CONTENT_TYPE,
    TRACEPARENTS_HEADER,
    Event,
    encode,
    epoch_seconds,
)
from services.core.tracecontext import HEADER as TRACEPARENT

# Where a message goes (docs/adr/0115, routes.py): an index into the publisher's table of (exchange, mandatory).
EVENTS = 0  # the events exchange, mandatory: a delivery event, its one message (its queues are bound there)
SINGLE = 1  # the events exchange, not mandatory: a fan-out event's own message, the published contract, for
#             consumers that are not walfeed's (there may be none)
GROUPED = 2  # the grouped exchange, mandatory: a fan-out event for walfeed's consumers, alone or in a group

T = TypeVar("T", covariant=True)  # an Outgoing[int] is an Outgoing[int | range]: it is immutable
S = TypeVar("S")


class Outgoing(NamedTuple, Generic[T]):
    """One message to publish. Immutable; a NamedTuple, cheaper to build than a frozen dataclass, because one is
    built per event (docs/adr/0015)."""

    token: T
    body: bytes
    message_id: str
    type: str  # the event type, and so the routing key
    timestamp: int
    traceparent: str | None = None  # the event's creation context (its outbox row's), the `traceparent` header
    # A group's message only: its events' creation contexts in order, "" for one without (the TRACEPARENTS_HEADER);
    # None for a single event's message. A group's `traceparent` is its first event's: the parent of its send span.
    traceparents: tuple[str, ...] | None = None
    route: int = EVENTS  # EVENTS, SINGLE or GROUPED

    @property
    def events(self) -> int:
        """How many events the message carries."""
        return 1 if self.traceparents is None else len(self.traceparents)


def outgoing(event: Event, token: S, traceparent: str | None = None) -> Outgoing[S]:
    return Outgoing(token=token, body=encode(event), message_id=str(event.id), type=event.type,
                    timestamp=epoch_seconds(event.occurred_at), traceparent=traceparent)


class EventProperties(pika.BasicProperties):  # type: ignore[misc]  # pika is untyped
    """The properties of an event message: persistent, JSON, with its id, type and time, and the `traceparent`
    header when the event has a trace context.

    One is built per message on the relay's hot path: the constant properties are class attributes and `__init__`
    sets the three that vary, instead of BasicProperties' fourteen assignments (docs/adr/0015). `encode()` writes
    the bytes pika's BasicProperties.encode() writes for the same values (tests/unit/test_relay_pika_pin.py) with
    the constant part encoded once: pika's generic table encoder made the `traceparent` header cost 3 us a message,
    more than the rest of the properties (docs/adr/0072). An instance someone changed after `__init__` (any other
    attribute set), or a value pika would refuse, is encoded by pika's own code.
    """

    content_type = CONTENT_TYPE
    delivery_mode = pika.DeliveryMode.Persistent.value
    content_encoding = headers = priority = correlation_id = reply_to = expiration = None
    user_id = app_id = cluster_id = None

    def __init__(self, message_id: str, type: str, timestamp: int, traceparent: str | None = None) -> None:
        self.message_id, self.type, self.timestamp = message_id, type, timestamp
        if traceparent is not None:
            self.headers = {TRACEPARENT: traceparent}

    def encode(self) -> list[bytes]:
        fields = self.__dict__
        headers = fields.get("headers")
        message_id, type = self.message_id.encode(), self.type.encode()
        if len(fields) != (4 if headers is not None else 3) or len(message_id) > 255 or len(type) > 255 or not (
                0 <= self.timestamp < 1 << 64) or (headers is not None and headers.keys() != {TRACEPARENT}):
            return super().encode()  # type: ignore[no-any-return]
        if headers is None:
            return [_PLAIN, _MODE, _LENGTH[len(message_id)], message_id, _U64.pack(self.timestamp),
                    _LENGTH[len(type)], type]
        traceparent = headers[TRACEPARENT].encode()
        return [_TRACED, _U32.pack(len(_TRACE_KEY) + 4 + len(traceparent)), _TRACE_KEY, _U32.pack(len(traceparent)),
                traceparent, _MODE, _LENGTH[len(message_id)], message_id, _U64.pack(self.timestamp),
                _LENGTH[len(type)], type]


def group_properties(message: Outgoing[object]) -> pika.BasicProperties:
    """The properties of a group's message (docs/events.md "Groups"): its first event's id and time, the group
    content type, and the events' trace contexts in one header when at least one of them has one. Encoded by pika
    (one per group, not per event)."""
    traceparents = message.traceparents
    return pika.BasicProperties(
        content_type=GROUP_CONTENT_TYPE, delivery_mode=pika.DeliveryMode.Persistent.value,
        message_id=message.message_id, type=message.type, timestamp=message.timestamp,
        headers={TRACEPARENTS_HEADER: list(traceparents)} if traceparents and any(traceparents) else None)


# EventProperties.encode's constant parts, in the order and form of pika's BasicProperties.encode: the property
# flags (16 bits), the content type (a short string), the delivery mode (an octet); a header table holds one
# `traceparent` long string (a short-string key, 'S', a 32-bit length, the bytes).
_P = pika.BasicProperties
_FLAGS = _P.FLAG_CONTENT_TYPE | _P.FLAG_DELIVERY_MODE | _P.FLAG_MESSAGE_ID | _P.FLAG_TIMESTAMP | _P.FLAG_TYPE
_CONTENT_TYPE = bytes([len(CONTENT_TYPE)]) + CONTENT_TYPE.encode()
_PLAIN = struct.pack(">H", _FLAGS) + _CONTENT_TYPE
_TRACED = struct.pack(">H", _FLAGS | _P.FLAG_HEADERS) + _CONTENT_TYPE
_MODE = struct.pack("B", EventProperties.delivery_mode)
_TRACE_KEY = bytes([len(TRACEPARENT)]) + TRACEPARENT.encode() + b"S"
_LENGTH = [bytes([n]) for n in range(256)]
_U32, _U64 = struct.Struct(">I"), struct.Struct(">Q")
