from __future__ import annotations

import uuid
from datetime import UTC, datetime

import orjson
import pytest

from services.cdc_relay.relay import outgoing
from services.cdc_relay.wal2json import Begin, Commit, Ignored, Insert, MessageError, format_lsn, parse, parse_lsn

EVENT_ID = "949c8fe4-a458-4407-91e7-32424b7a9ce8"


def insert(table: str = "outbox", **override: object) -> bytes:
    values: dict[str, object] = {"id": EVENT_ID, "aggregatetype": "post", "aggregateid": "7", "type": "post.created",
                                 "payload": '{"post_id": 7, "author_id": 3}',
                                 "created_at": "2026-11-29 19:29:48.858487+00", **override}
    columns = [{"name": k, "value": v} for k, v in values.items() if v is not None]
    return orjson.dumps({"action": "I", "lsn": "0/48E1A20", "schema": "public", "table": table,
                         "columns": columns})


def test_lsn_round_trip() -> None:
    assert parse_lsn("16/B374D848") == (0x16 << 32) | 0xB374D848
    assert format_lsn(parse_lsn("0/48E1B68")) == "0/48E1B68"
    with pytest.raises(MessageError):
        parse_lsn("nonsense")


def test_begin_and_commit() -> None:
    assert parse(b'{"action":"B","lsn":"0/48E1488","nextlsn":"0/48E1A20"}') == Begin()
    assert parse(b'{"action":"C","lsn":"0/48E1488","nextlsn":"0/48E1A20"}') == Commit(0x48E1488, 0x48E1A20)


def test_outbox_insert_becomes_the_event() -> None:
    message = parse(insert())
    assert isinstance(message, Insert)
    event = message.event
    assert event.id == uuid.UUID(EVENT_ID)
    assert (event.type, event.aggregate_type, event.aggregate_id) == ("post.created", "post", "7")
    assert event.payload == {"post_id": 7, "author_id": 3}
    assert event.occurred_at == datetime(2026, 11, 29, 19, 29, 48, 858487, tzinfo=UTC)


def test_the_amqp_message_of_an_event() -> None:
    message = parse(insert())
    assert isinstance(message, Insert)
    out = outgoing(message.event, (1, 1))
    assert out.routing_key == out.type == "post.created"
    assert out.message_id == EVENT_ID
    assert out.timestamp == int(datetime(2026, 11, 29, 19, 29, 48, tzinfo=UTC).timestamp())
    body = orjson.loads(out.body)
    assert body["occurred_at"] == "2026-11-29T19:29:48.858487Z"
    assert body["aggregate_type"] == "post" and body["payload"] == {"post_id": 7, "author_id": 3}


def test_a_payload_the_relay_does_not_judge_is_passed_through() -> None:
    message = parse(insert(type="mystery.happened", payload='{"x": "y"}'))
    assert isinstance(message, Insert) and message.event.payload == {"x": "y"}  # type: ignore[comparison-overlap]


def test_other_tables_and_actions_are_ignored() -> None:
    assert isinstance(parse(insert(table="posts")), Ignored)
    assert parse(b'{"action":"M","prefix":"x","content":"y"}') == Ignored("M")


@pytest.mark.parametrize("bad", [b"not json", b"[1]", insert(id=None), insert(created_at="yesterday"),
                                 insert(payload="{broken")])
def test_what_cannot_be_understood_is_an_error(bad: bytes) -> None:
    with pytest.raises(MessageError):
        parse(bad)
