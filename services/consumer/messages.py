"""A delivery as the runtime holds it, and a message as a handler sees it: a delivery may hold several events of
one type (a group, docs/adr/0095), each a `Part` applied, retried and dead-lettered as if it were a message of its
own; the delivery is acked once all its parts are settled. Pure but for pika's property objects."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

import orjson
import pika

from services.consumer.outcomes import Outcome
from services.core import events, tracing
from services.core.events import GROUP_CONTENT_TYPE, Event, MalformedEvent
from services.core.tracecontext import HEADER as TRACEPARENT


@dataclass(frozen=True, slots=True)
class Message:
    body: bytes
    headers: Mapping[str, object] | None
    refused: str | None = None  # why it cannot be read at all (a malformed group): dead-lettered with this reason


@dataclass(frozen=True, slots=True)
class Result:
    outcome: Outcome
    event_type: str  # "malformed" when the body could not be decoded
    event_id: str | None
    label: str  # what the handler did, or why it failed
    seconds: float
    event: Event | None = None  # the decoded event: a Large outcome's continuation, the delay metric of an Ack


@dataclass(frozen=True, slots=True)
class Part:
    """One event of a delivery: the message it would be on its own (`message`), and the delivery's properties."""

    message: Message
    delivery_props: pika.BasicProperties
    alone: bool  # the delivery is this message as it came (one event, or a group too malformed to split)

    @property
    def props(self) -> pika.BasicProperties:
        """Its properties as a message of its own: for its retry copy or dead letter, and its process span."""
        return self.delivery_props if self.alone else part_properties(self.delivery_props, self.message)

    def received(self, result: Result) -> tracing.Received:
        """What the process span says of this event (its creation context is in its headers)."""
        props = self.props
        return tracing.Received(self.message.headers, props.message_id, props.type,
                                type(result.outcome).__name__.lower())


@dataclass(frozen=True, slots=True)
class Delivery:
    tag: int
    props: pika.BasicProperties
    body: bytes
    parts: list[Part]  # one event each: the message itself, or the events of a group (never empty)

    @classmethod
    def of(cls, tag: int, props: pika.BasicProperties, body: bytes) -> Delivery:
        if props.content_type != GROUP_CONTENT_TYPE:
            return cls(tag, props, body, [Part(Message(body, props.headers), props, alone=True)])
        try:
            messages = split(body, props.headers)
        except MalformedEvent as exc:  # dead-lettered as it came, with the reason
            return cls(tag, props, body, [Part(Message(body, props.headers, refused=str(exc)), props, alone=True)])
        return cls(tag, props, body, [Part(m, props, alone=False) for m in messages])


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


_SHORT_STRING = 255  # bytes of an AMQP short string (message_id)


def part_properties(group: pika.BasicProperties, message: Message) -> pika.BasicProperties:
    """The properties of a group's event as a message of its own (docs/events.md): its id and time, read from its
    body (the group's where it has none), the group's type, and its own headers."""
    try:
        data = orjson.loads(message.body)
        found, occurred = data.get("id"), datetime.fromisoformat(data["occurred_at"])
        timestamp = events.epoch_seconds(occurred) if occurred.tzinfo is not None else group.timestamp
    except (orjson.JSONDecodeError, AttributeError, KeyError, TypeError, ValueError):  # judged malformed alone
        found, timestamp = None, group.timestamp
    if not isinstance(found, str) or len(found.encode("utf-8", "surrogatepass")) > _SHORT_STRING:
        found = group.message_id  # an AMQP short string: a longer id could not be published again (a dead letter)
    if not isinstance(timestamp, int) or not 0 <= timestamp < 2**64:
        timestamp = group.timestamp  # an unsigned 64-bit field: a time before 1970 could not be either
    return pika.BasicProperties(
        message_id=found, type=group.type, content_type=events.CONTENT_TYPE, timestamp=timestamp,
        delivery_mode=pika.DeliveryMode.Persistent, headers=dict(message.headers) if message.headers else None)
