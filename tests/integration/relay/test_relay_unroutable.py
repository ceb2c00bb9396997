"""A mandatory publish nobody takes is not a success: retried, position held, delivered once a queue is bound. A
fan-out event's copy for walfeed's queues, on the grouped exchange, is mandatory (docs/adr/0115)."""

from __future__ import annotations

import pika
import pytest

from services.core.topology import Topology
from testkit.infra import Infra
from testkit.resources import event_ids
from testkit.waiting import eventually
from tests.integration.relay.conftest import StartRelay, current_lsn, slot_lsn, write_events

pytestmark = pytest.mark.integration


def test_returned_events_hold_the_position_until_a_queue_is_bound(
        infra: Infra, topology: Topology, database_url: str, slot_name: str,
        start_relay: StartRelay) -> None:
    relay = start_relay()
    eventually(lambda: "streaming" in relay.log(), timeout=30, what="relay streaming")
    ids = set(write_events(database_url, 10, per_txn=10))
    committed = current_lsn(database_url)  # after our commit record
    eventually(lambda: "unroutable" in relay.log(), timeout=30, what="loud unroutable warning")
    assert slot_lsn(database_url, slot_name) < committed  # held before our transaction

    conn = pika.BlockingConnection(pika.URLParameters(infra.amqp_url))
    channel = conn.channel()
    queue = f"{topology.prefix}.test.late"
    channel.queue_declare(queue, auto_delete=False)
    channel.queue_bind(queue, topology.grouped_exchange, "#")
    try:
        def arrived() -> bool:
            got = set()
            while (message := channel.basic_get(queue, auto_ack=False))[0] is not None:
                got.update(event_ids(message[1], message[2]))  # a group's events apart
            channel.basic_recover(requeue=True)
            return ids.issubset(got)
        eventually(arrived, timeout=30, interval=0.5, what="events delivered after the binding")
        end = current_lsn(database_url)
        eventually(lambda: slot_lsn(database_url, slot_name) >= end, timeout=30, what="position released")
    finally:
        channel.queue_delete(queue)
        conn.close()
