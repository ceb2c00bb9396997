import uuid
from datetime import UTC, datetime

import orjson
import pytest

from services.core import events
from services.core.events import Event, MalformedEvent


def test_round_trip() -> None:
    event = Event.new(events.POST_CREATED, 7, {"post_id": 7, "author_id": 3})
    decoded = events.decode(events.encode(event))
    assert decoded == event
    body = orjson.loads(events.encode(event))
    assert set(body) == {"id", "type", "aggregate_type", "aggregate_id", "occurred_at", "payload"}
    assert body["aggregate_type"] == "post" and body["occurred_at"].endswith("Z")


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"not json", "not JSON"),
        (b"[1]", "object"),
        (b'{"type": "post.created"}', "missing field"),
        (orjson.dumps({"id": str(uuid.uuid4()), "type": "post.exploded", "aggregate_id": "1",
                       "occurred_at": "2026-01-01T00:00:00Z", "payload": {}}), "unknown event type"),
        (orjson.dumps({"id": str(uuid.uuid4()), "type": "post.created", "aggregate_id": "1",
                       "occurred_at": "2026-01-01T00:00:00Z", "payload": {"post_id": "1", "author_id": 2}}),
         "integer 'post_id'"),
        (orjson.dumps({"id": "nope", "type": "post.created", "aggregate_id": "1",
                       "occurred_at": "2026-01-01T00:00:00Z", "payload": {"post_id": 1, "author_id": 2}}),
         "invalid field"),
    ],
)
def test_malformed_bodies_say_why(body: bytes, reason: str) -> None:
    with pytest.raises(MalformedEvent, match=reason):
        events.decode(body)


def test_epoch_seconds_are_exact_where_a_float_timestamp_rounds_up() -> None:
    moment = datetime(2515, 1, 1, 0, 0, 0, 999_999, tzinfo=UTC)
    assert int(moment.timestamp()) == 17198524801  # the float rounds .999999 up: what the relay used to send
    assert events.epoch_seconds(moment) == 17198524800
    assert events.epoch_seconds(datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC)) == 1
