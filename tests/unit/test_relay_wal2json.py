from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta, timezone

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.cdc_relay.messages import outgoing
from services.cdc_relay.wal2json import (
    Begin,
    Commit,
    Ignored,
    Insert,
    MessageError,
    fast_insert,
    format_lsn,
    outbox_event,
    parse,
    parse_lsn,
)
from services.core import tracecontext
from services.core.events import encode

EVENT_ID = "949c8fe4-a458-4407-91e7-32424b7a9ce8"


MISSING = object()  # a column left out of the message


TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def insert(table: str = "outbox", **override: object) -> bytes:
    """An outbox insert as wal2json prints it (compact JSON, the columns in table order, the polling source's
    columns null, the trace column as the api writes it)."""
    values: dict[str, object] = {"id": EVENT_ID, "aggregatetype": "post", "aggregateid": "7", "type": "post.created",
                                 "payload": '{"post_id": 7, "author_id": 3}',
                                 "created_at": "2026-11-29 19:29:48.858487+00", "published_at": None,
                                 "claimed_by": None, "claim_expires_at": None,
                                 "tracingspancontext": f"traceparent={TRACEPARENT}", **override}
    columns = [{"name": k, "value": v} for k, v in values.items() if v is not MISSING]
    return orjson.dumps({"action": "I", "lsn": "0/48E1A20", "schema": "public", "table": table,
                         "columns": columns})


def reference(raw: bytes) -> Insert:
    """The message the reference path (the whole JSON, the Event, encode) makes of an insert."""
    columns = orjson.loads(raw)["columns"]
    event = outbox_event(columns)
    trace = tracecontext.from_column({c["name"]: c["value"] for c in columns}.get("tracingspancontext"))
    out = outgoing(event, None, trace.header if trace is not None else None)
    return Insert(out.message_id, out.type, out.body, out.timestamp, out.traceparent)


def test_lsn_round_trip() -> None:
    assert parse_lsn("16/B374D848") == (0x16 << 32) | 0xB374D848
    assert format_lsn(parse_lsn("0/48E1B68")) == "0/48E1B68"
    with pytest.raises(MessageError):
        parse_lsn("nonsense")


def test_begin_and_commit() -> None:
    assert parse(b'{"action":"B","lsn":"0/48E1488","nextlsn":"0/48E1A20"}') == Begin()
    assert parse(b'{"action":"C","lsn":"0/48E1488","nextlsn":"0/48E1A20"}') == Commit(0x48E1A20)


def test_outbox_insert_becomes_the_amqp_message() -> None:
    message = parse(insert())
    assert isinstance(message, Insert) and fast_insert(insert()) == message
    assert (message.event_id, message.type, message.traceparent) == (EVENT_ID, "post.created", TRACEPARENT)
    assert message.timestamp == int(datetime(2026, 11, 29, 19, 29, 48, tzinfo=UTC).timestamp())
    body = orjson.loads(message.body)
    assert body == {"id": EVENT_ID, "type": "post.created", "aggregate_type": "post", "aggregate_id": "7",
                    "occurred_at": "2026-11-29T19:29:48.858487Z", "payload": {"post_id": 7, "author_id": 3}}


def test_the_outbox_event_reference_path() -> None:
    event = outbox_event(orjson.loads(insert())["columns"])
    assert event.id == uuid.UUID(EVENT_ID)
    assert (event.type, event.aggregate_type, event.aggregate_id) == ("post.created", "post", "7")
    assert event.payload == {"post_id": 7, "author_id": 3}
    assert event.occurred_at == datetime(2026, 11, 29, 19, 29, 48, 858487, tzinfo=UTC)


def test_the_amqp_message_of_an_event() -> None:
    event = outbox_event(orjson.loads(insert())["columns"])
    out = outgoing(event, (1, 1))
    assert out.type == "post.created"
    assert out.message_id == EVENT_ID and out.body == encode(event)
    assert out.timestamp == int(datetime(2026, 11, 29, 19, 29, 48, tzinfo=UTC).timestamp())


# Timestamps as Postgres prints them: microseconds trimmed of trailing zeros, omitted when zero.
def _pg_timestamp(moment: datetime, offset_minutes: int) -> str:
    local = moment.astimezone(timezone(timedelta(minutes=offset_minutes)))
    text = local.strftime("%Y-%m-%d %H:%M:%S")
    if local.microsecond:
        text += f".{local.microsecond:06d}".rstrip("0")
    hours, minutes = divmod(abs(offset_minutes), 60)
    text += ("-" if offset_minutes < 0 else "+") + f"{hours:02d}" + (f":{minutes:02d}" if minutes else "")
    return text


@settings(max_examples=400, deadline=None)
@given(moment=st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(9998, 12, 31), timezones=st.just(UTC)),
       offset=st.sampled_from([0, 0, 0, 60, -300, 330, 765]),
       event_id=st.uuids(), upper=st.booleans(), aggregate_id=st.text(max_size=12),
       type=st.sampled_from(["post.created", "follow.deleted", "x.y", 'quote"d', "back\\slash", "tab\t", "é"]),
       payload=st.dictionaries(st.text(max_size=8), st.integers(-2**63, 2**63 - 1) | st.text(max_size=5),
                               max_size=4),
       claimed_by=st.sampled_from([None, None, "poller-1"]),
       trace=st.sampled_from([None, f"traceparent={TRACEPARENT}", f"traceparent={TRACEPARENT}", TRACEPARENT,
                              f"#Tue Dec 01 06:00:00 UTC 2026\ntraceparent={TRACEPARENT}\n",
                              "traceparent=00-00000000000000000000000000000000-00f067aa0ba902b7-01",
                              "traceparent=00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
                              "traceparent=garbage", "", "traceparent= " + TRACEPARENT]))
def test_the_fast_path_is_exactly_the_reference_path(moment: datetime, offset: int, event_id: uuid.UUID,
                                                     upper: bool, aggregate_id: str, type: str,
                                                     payload: dict[str, object], claimed_by: str | None,
                                                     trace: str | None) -> None:
    """Whatever the row holds, `parse` gives what the reference path (the whole JSON, the Event, encode) gives; and
    it takes the fast path whenever the row is in the layout and forms it reads."""
    text_id = str(event_id).upper() if upper else str(event_id)
    jsonb = json.dumps(payload)  # jsonb's text output: with spaces after separators
    raw = insert(id=text_id, type=type, aggregateid=aggregate_id, payload=jsonb,
                 created_at=_pg_timestamp(moment, offset), claimed_by=claimed_by, tracingspancontext=trace)
    message = parse(raw)
    expected = reference(raw)
    assert message == expected
    escaped = any(c in '"\\' or ord(c) < 0x20 for c in aggregate_id + type)
    fast = fast_insert(raw)
    unusual_trace = trace is not None and trace != f"traceparent={TRACEPARENT}"
    if not (upper or offset or escaped or claimed_by or unusual_trace):
        assert fast == expected
    else:
        assert fast is None  # another form or layout: the reference path made it


@pytest.mark.parametrize(("column", "header"), [
    (None, None),
    (f"traceparent={TRACEPARENT}", TRACEPARENT),
    (f"#Tue Dec 01 06:00:00 UTC 2026\ntraceparent={TRACEPARENT}\ntracestate=a=b\n", TRACEPARENT),  # Debezium's
    (TRACEPARENT, TRACEPARENT),
    ("traceparent=00-00000000000000000000000000000000-00f067aa0ba902b7-01", None),
    ("traceparent=not-a-trace", None),
    ("tracestate=a=b", None),
])
def test_the_trace_column_becomes_the_traceparent_header_or_nothing(column: str | None, header: str | None) -> None:
    """A valid trace context is copied; anything else is dropped, never a reason to hold the event back."""
    message = parse(insert(tracingspancontext=column))
    assert isinstance(message, Insert) and message.traceparent == header and message.event_id == EVENT_ID


def test_a_payload_the_relay_does_not_judge_is_passed_through() -> None:
    message = parse(insert(type="mystery.happened", payload='{"x": "y"}'))
    assert isinstance(message, Insert) and orjson.loads(message.body)["payload"] == {"x": "y"}


def test_other_tables_and_actions_are_ignored() -> None:
    assert isinstance(parse(insert(table="posts")), Ignored)
    assert parse(b'{"action":"M","prefix":"x","content":"y"}') == Ignored("M")


@pytest.mark.parametrize("bad", [b"not json", b"[1]", insert(id=MISSING), insert(created_at="yesterday"),
                                 insert(created_at="2026-02-30 10:00:00+00"),
                                 insert(payload="{broken"), insert(type=MISSING), insert(id="not-a-uuid"),
                                 insert(created_at=MISSING), insert(id=None),
                                 b'{"action":"I","schema":"public","table":"outbox",'
                                 b'"columns":[{"name":"id"}]}', b'{"action":"I","schema":"public",'
                                 b'"table":"outbox","columns":["id"]}'])
def test_what_cannot_be_understood_is_an_error(bad: bytes) -> None:
    with pytest.raises(MessageError):
        parse(bad)
