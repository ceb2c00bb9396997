"""The relay's fast path reads the bytes wal2json prints for the outbox table as db/init creates it. Here the real
plugin prints real rows (written with the API's own statement): if a migration changes the outbox's layout, this
fails instead of every event quietly taking the slower reference path."""

from __future__ import annotations

import orjson
import psycopg
import pytest

from services.cdc_relay import stream, wal2json
from services.cdc_relay.messages import outgoing
from services.core import events as ev
from services.core import tracecontext
from tests.integration.worker import world

pytestmark = pytest.mark.integration

_PEEK = "SELECT data FROM pg_logical_slot_peek_changes(%s, NULL, NULL, VARIADIC %s::text[])"


def test_rows_written_by_the_api_take_the_fast_path(database_url: str, slot_name: str) -> None:
    written = [ev.Event.new(ev.POST_CREATED, 41, {"post_id": 41, "author_id": 7}),
               ev.Event.new(ev.FOLLOW_CREATED, "7:9", {"follower_id": 7, "followee_id": 9}),
               ev.Event.new(ev.POST_DELETED, "ünïcode-aggregate", {"post_id": 41, "author_id": 7})]
    traces = [tracecontext.to_column(tracecontext.new()), None, tracecontext.to_column(tracecontext.new(False))]
    with psycopg.connect(database_url) as conn:
        for event, trace in zip(written, traces, strict=True):
            world.insert_outbox(conn, event, trace)  # the API's own statement
        conn.commit()
        conn.execute(stream.SESSION)  # the relay's replication session settings
        options = [part for pair in wal2json.OPTIONS.items() for part in pair]
        rows = conn.execute(_PEEK, (slot_name, options)).fetchall()

    inserts = [data.encode() for (data,) in rows if data.startswith('{"action":"I"')]
    assert len(inserts) == len(written)
    for raw, event, trace in zip(inserts, written, traces, strict=True):
        fast = wal2json.fast_insert(raw)
        assert fast is not None, f"the fast path does not read this layout: {raw!r}"
        assert fast == wal2json.parse(raw.replace(b'"action":"I"', b'"action": "I"'))  # the reference path's
        reference = outgoing(wal2json.outbox_event(orjson.loads(raw)["columns"]), None)
        assert fast[:4] == (reference.message_id, reference.type, reference.body, reference.timestamp)
        assert fast.traceparent == (trace.removeprefix("traceparent=") if trace else None)
        assert orjson.loads(fast.body)["payload"] == event.payload and fast.event_id == str(event.id)
