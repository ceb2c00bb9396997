"""With WALFEED_RELAY_GROUP_MAX above 1 (docs/adr/0095) a real relay on a real slot publishes consecutive events of one
fan-out type read together as one message: each event arrives exactly once, in a message of at most the setting's
events whose properties are its first event's, with the group content type and the events' trace contexts aligned
with them; a delivery event goes alone; the slot's position passes the last commit."""

from __future__ import annotations

import uuid
from collections import Counter

import orjson
import psycopg
import pytest

from services.core.events import CONTENT_TYPE, GROUP_CONTENT_TYPE, TRACEPARENTS_HEADER
from testkit.waiting import eventually
from tests.integration.relay.conftest import StartRelay, Watcher, bodies, current_lsn, slot_lsn, write_events

pytestmark = pytest.mark.integration

GROUP_MAX = 10
TRACE = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
_INSERT = """
INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, tracingspancontext)
VALUES (%s, %s, '1', %s, %s, %s)
"""


def write_mixed(database_url: str) -> tuple[list[str], str, str]:
    """One transaction: two post.created (the second traced), a delivery.webhook, a post.created. Returns the ids,
    the delivery's and the traced event's."""
    rows = [("post", "post.created", None), ("post", "post.created", f"traceparent={TRACE}"),
            ("delivery", "delivery.webhook", None), ("post", "post.created", None)]
    ids = [str(uuid.uuid4()) for _ in rows]
    with psycopg.connect(database_url) as conn:
        for event_id, (aggregate, type, trace) in zip(ids, rows, strict=True):
            payload = {"delivery_id": 1} if aggregate == "delivery" else {"post_id": 1, "author_id": 1}
            conn.execute(_INSERT, (event_id, aggregate, type, orjson.dumps(payload).decode(), trace))
    return ids, ids[2], ids[1]


def test_grouped_events_arrive_once_each_and_the_slot_passes_the_last_commit(
        database_url: str, slot_name: str, watcher: Watcher, start_relay: StartRelay) -> None:
    # Written before the relay starts: the backlog is read together, so groups fill up to GROUP_MAX.
    ids = write_events(database_url, 45, per_txn=15)
    mixed, delivery, traced = write_mixed(database_url)
    ids += mixed + write_events(database_url, 40, per_txn=20)
    target = current_lsn(database_url)
    start_relay(WALFEED_RELAY_GROUP_MAX=str(GROUP_MAX))
    eventually(lambda: watcher.has_all_events(set(ids)), timeout=30, what="every event on the exchange")
    eventually(lambda: slot_lsn(database_url, slot_name) >= target, timeout=30, what="slot confirmed position")
    watcher.pump()

    assert Counter(watcher.event_ids()) == Counter(ids)  # each exactly once
    sizes, traced_in_group = [], False
    for message in watcher.messages:
        events = [orjson.loads(body) for body in bodies(message)]
        props = message.properties
        sizes.append(len(events))
        assert props.message_id == events[0]["id"] and props.delivery_mode == 2
        assert {e["type"] for e in events} == {props.type} == {message.routing_key}
        if len(events) == 1:  # published exactly as without grouping
            assert props.content_type == CONTENT_TYPE
            continue
        assert props.content_type == GROUP_CONTENT_TYPE and props.type == "post.created"
        if traced in [e["id"] for e in events]:
            traced_in_group = True
            assert props.headers == {TRACEPARENTS_HEADER: [TRACE if e["id"] == traced else "" for e in events]}
        else:
            assert not props.headers
    assert max(sizes) == GROUP_MAX and len(watcher.messages) < len(ids) and traced_in_group
    alone = next(m for m in watcher.messages if m.properties.message_id == delivery)
    assert alone.properties.content_type == CONTENT_TYPE and alone.routing_key == "delivery.webhook"
