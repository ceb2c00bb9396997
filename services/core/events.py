"""The event envelope (docs/events.md) and its JSON codec. Pure: no I/O."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import orjson

POST_CREATED: Final = "post.created"
POST_DELETED: Final = "post.deleted"
FOLLOW_CREATED: Final = "follow.created"
FOLLOW_DELETED: Final = "follow.deleted"
DELIVERY_WEBHOOK: Final = "delivery.webhook"
DELIVERY_EMAIL: Final = "delivery.email"

# type -> (aggregate type, payload keys; every payload value is an integer id)
EVENT_TYPES: Final[dict[str, tuple[str, tuple[str, ...]]]] = {
    POST_CREATED: ("post", ("post_id", "author_id")),
    POST_DELETED: ("post", ("post_id", "author_id")),
    FOLLOW_CREATED: ("follow", ("follower_id", "followee_id")),
    FOLLOW_DELETED: ("follow", ("follower_id", "followee_id")),
    # A notification's delivery to one target, written by the notifier (docs/notifications.md).
    DELIVERY_WEBHOOK: ("delivery", ("delivery_id",)),
    DELIVERY_EMAIL: ("delivery", ("delivery_id",)),
}

# The types the fan-out worker consumes (its queue's bindings, services/core/topology.py).
FANOUT_TYPES: Final = frozenset({POST_CREATED, POST_DELETED, FOLLOW_CREATED, FOLLOW_DELETED})

CONTENT_TYPE: Final = "application/json"
# A message holding several events of one type (docs/events.md "Groups", docs/adr/0095): its body a JSON array of
# their bodies, each as `encode` writes it; the events' trace contexts in TRACEPARENTS_HEADER, in the same order.
GROUP_CONTENT_TYPE: Final = "application/vnd.walfeed.events+json"
TRACEPARENTS_HEADER: Final = "x-walfeed-traceparents"


class MalformedEvent(ValueError):
    """A message body that is not a valid walfeed event. It can never succeed: dead-letter it."""


@dataclass(frozen=True, slots=True)
class Event:
    id: uuid.UUID
    type: str
    aggregate_type: str
    aggregate_id: str
    occurred_at: datetime
    payload: dict[str, int] = field(hash=False)

    @classmethod
    def new(cls, type: str, aggregate_id: int | str, payload: dict[str, int]) -> Event:
        """A fresh event, as the API writes it to the outbox."""
        aggregate_type, _ = _schema(type)
        validate_payload(type, payload)
        return cls(uuid.uuid4(), type, aggregate_type, str(aggregate_id), datetime.now(UTC), dict(payload))


def _schema(type: str) -> tuple[str, tuple[str, ...]]:
    try:
        return EVENT_TYPES[type]
    except KeyError:
        raise MalformedEvent(f"unknown event type {type!r}") from None


def validate_payload(type: str, payload: Any) -> dict[str, int]:
    _, keys = _schema(type)
    if not isinstance(payload, dict):
        raise MalformedEvent(f"{type} payload must be an object")
    for key in keys:
        value = payload.get(key)
        if not isinstance(value, int) or isinstance(value, bool):
            raise MalformedEvent(f"{type} payload needs an integer {key!r}")
    return {key: payload[key] for key in keys}


_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


def epoch_seconds(moment: datetime) -> int:
    """Whole seconds since the epoch (the AMQP timestamp property), in integers: int(moment.timestamp()) goes
    through a float, which rounds x.999999 up to x + 1 from the 2500s on."""
    return (moment - _EPOCH) // timedelta(seconds=1)


def encode(event: Event) -> bytes:
    """The AMQP message body of docs/events.md."""
    return orjson.dumps(
        {
            "id": str(event.id),
            "type": event.type,
            "aggregate_type": event.aggregate_type,
            "aggregate_id": event.aggregate_id,
            "occurred_at": event.occurred_at.astimezone(UTC).isoformat().replace("+00:00", "Z"),
            "payload": event.payload,
        }
    )


def decode(body: bytes) -> Event:
    """Parse and validate a message body; raises MalformedEvent with the reason."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise MalformedEvent(f"body is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise MalformedEvent("body must be a JSON object")
    try:
        event_id = uuid.UUID(str(data["id"]))
        type = str(data["type"])
        occurred_at = datetime.fromisoformat(str(data["occurred_at"]))
        aggregate_id = str(data["aggregate_id"])
    except KeyError as exc:
        raise MalformedEvent(f"missing field {exc.args[0]!r}") from None
    except ValueError as exc:
        raise MalformedEvent(f"invalid field: {exc}") from None
    aggregate_type, _ = _schema(type)
    payload = validate_payload(type, data.get("payload"))
    if occurred_at.tzinfo is None:
        raise MalformedEvent("occurred_at must carry a time zone")
    return Event(event_id, type, aggregate_type, aggregate_id, occurred_at, payload)


def encode_group(bodies: Sequence[bytes]) -> bytes:
    """The body of a message holding several events: a JSON array of their bodies (each as `encode` writes it)."""
    return b"[" + b",".join(bodies) + b"]"


def split_group(body: bytes) -> list[bytes]:
    """The bodies of a group's events, each as a message of its own would carry it (any JSON value: each is decoded
    and judged on its own). Raises MalformedEvent when the body is not a non-empty JSON array."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise MalformedEvent(f"group body is not JSON: {exc}") from None
    if not isinstance(data, list) or not data:
        raise MalformedEvent("a group's body must be a non-empty JSON array")
    return [orjson.dumps(item) for item in data]
