"""A real relay on a real slot, with its defaults (docs/adr/0115, 0095): the events exchange carries every event once,
alone, as the published contract says, for consumers that are not walfeed's; the grouped exchange carries every
fan-out event once more, consecutive events of one type read together as one message of at most
WALFEED_RELAY_GROUP_MAX (10) events whose properties are its first event's, with the group content type and the
events' trace contexts aligned with them; a delivery event goes only to the events exchange; the slot's position
passes the last commit only once both copies were taken, and with nobody bound to the single events it still does."""

from __future__ import annotations

import uuid
from collections import Counter

import orjson
import pika
import psycopg
import pytest

from services.core.events import CONTENT_TYPE, GROUP_CONTENT_TYPE, TRACEPARENTS_HEADER
from services.core.topology import Topology
from testkit import resources
from testkit.infra import Infra
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


def test_the_events_exchange_carries_each_event_alone_and_the_grouped_exchange_walfeeds_groups(
        database_url: str, slot_name: str, watcher: Watcher, start_relay: StartRelay) -> None:
    # Written before the relay starts: the backlog is read together, so groups fill up to the default's 10.
    ids = write_events(database_url, 45, per_txn=15)
    mixed, delivery, traced = write_mixed(database_url)
    ids += mixed + write_events(database_url, 40, per_txn=20)
    fanout = [i for i in ids if i != delivery]
    target = current_lsn(database_url)
    start_relay()  # the defaults: WALFEED_RELAY_GROUP_MAX is 10 (docs/adr/0115)
    eventually(lambda: watcher.has_all_events(set(ids)) and set(fanout) <= set(watcher.grouped_event_ids()),
               timeout=30, what="every event on both exchanges")
    eventually(lambda: slot_lsn(database_url, slot_name) >= target, timeout=30, what="slot confirmed position")
    watcher.pump()

    # A consumer of the events exchange (not walfeed's) gets the published contract: one event a message.
    assert Counter(watcher.event_ids()) == Counter(ids) == Counter(watcher.ids())  # each exactly once, alone
    for message in watcher.messages:
        props, body = message.properties, orjson.loads(message.body)
        assert props.content_type == CONTENT_TYPE and props.message_id == body["id"] and props.delivery_mode == 2
        assert props.type == body["type"] == message.routing_key
        assert props.headers == ({"traceparent": TRACE} if body["id"] == traced else None)
    # Walfeed's queues get the fan-out events, each exactly once, in groups of up to 10; no delivery event.
    assert Counter(watcher.grouped_event_ids()) == Counter(fanout)
    sizes, traced_in_group = [], False
    for message in watcher.grouped:
        events = [orjson.loads(body) for body in bodies(message)]
        props = message.properties
        sizes.append(len(events))
        assert props.message_id == events[0]["id"] and props.delivery_mode == 2
        assert {e["type"] for e in events} == {props.type} == {message.routing_key}
        if len(events) == 1:  # published exactly as on the events exchange
            assert props.content_type == CONTENT_TYPE
            continue
        assert props.content_type == GROUP_CONTENT_TYPE and props.type == "post.created"
        if traced in [e["id"] for e in events]:
            traced_in_group = True
            assert props.headers == {TRACEPARENTS_HEADER: [TRACE if e["id"] == traced else "" for e in events]}
        else:
            assert not props.headers
    assert max(sizes) == GROUP_MAX and len(watcher.grouped) < len(fanout) and traced_in_group
    alone = next(m for m in watcher.messages if m.properties.message_id == delivery)
    assert alone.properties.content_type == CONTENT_TYPE and alone.routing_key == "delivery.webhook"


def test_with_no_queue_bound_for_single_events_the_slot_still_advances_once_walfeeds_queue_took_each(
        infra: Infra, topology: Topology, database_url: str, slot_name: str, start_relay: StartRelay) -> None:
    # Only walfeed's own kind of queue: nobody reads the events exchange's single fan-out events (not mandatory).
    conn = pika.BlockingConnection(pika.URLParameters(infra.amqp_url))
    channel = conn.channel()
    channel.exchange_declare(topology.grouped_exchange, exchange_type="topic", durable=True)
    queue = f"{topology.prefix}.test.walfeed"
    channel.queue_declare(queue)
    try:
        ids = write_events(database_url, 30, per_txn=10)
        target = current_lsn(database_url)
        relay = start_relay(WALFEED_RELAY_GROUP_MAX="1")
        # Not bound yet: the grouped copies come back (mandatory) and the position is held (ADR 0012).
        eventually(lambda: "unroutable" in relay.log(), timeout=30, what="the grouped copies returned")
        assert slot_lsn(database_url, slot_name) < target
        channel.queue_bind(queue, topology.grouped_exchange, "#")
        eventually(lambda: slot_lsn(database_url, slot_name) >= target, timeout=30, what="slot confirmed position")
        got: list[str] = []
        while (item := channel.basic_get(queue, auto_ack=True))[0] is not None:
            got += resources.event_ids(item[1], item[2])
        assert set(got) == set(ids)  # each at least once (returned and published again: duplicates, never losses)
    finally:
        channel.queue_delete(queue)
        conn.close()
