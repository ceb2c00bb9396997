"""Both sources copy an outbox row's trace context (its `tracingspancontext` column) into the message's
`traceparent` header, unchanged; a row without one, or with one that is not valid, is published without it
(docs/adr/0072). Real Postgres, RabbitMQ and `walfeed relay` processes."""

from __future__ import annotations

import uuid

import psycopg
import pytest

from testkit.processes import Processes
from testkit.waiting import eventually
from tests.integration.relay.conftest import RELAY_ENV, Watcher

pytestmark = pytest.mark.integration

VALID = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
UNSAMPLED = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
# column -> the header the consumers get (None: no headers at all)
ROWS = {
    f"traceparent={VALID}": VALID,  # as the api writes it
    f"#Tue Dec 01 06:00:00 UTC 2026\ntraceparent={UNSAMPLED}\n": UNSAMPLED,  # as Debezium's writers do
    None: None,  # a row written before the column, or by a writer that traces nothing
    "traceparent=not-a-trace": None,
}
_INSERT = """
INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, tracingspancontext)
VALUES (%s, 'post', '1', 'post.created', '{"post_id": 1, "author_id": 1}', %s)
"""


@pytest.mark.parametrize("source", ["cdc", "poll"])
def test_the_trace_column_becomes_the_traceparent_header(source: str, database_url: str, watcher: Watcher,
                                                         processes: Processes) -> None:
    processes.start("relay", "relay", "--source", source, env={**RELAY_ENV, "WALFEED_POLL_INTERVAL": "0.1"})
    expected: dict[str, str | None] = {}
    with psycopg.connect(database_url) as conn:
        for column, header in ROWS.items():
            event_id = str(uuid.uuid4())
            conn.execute(_INSERT, (event_id, column))
            expected[event_id] = header
        conn.commit()
    eventually(lambda: watcher.has_all(set(expected)), timeout=30, what="every event on the exchange")
    got = {str(m.properties.message_id): m.properties.headers for m in watcher.messages}
    assert got == {event_id: {"traceparent": header} if header else None for event_id, header in expected.items()}
