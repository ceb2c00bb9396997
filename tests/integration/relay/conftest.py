"""Fixtures of the relay tests: write outbox rows with SQL, watch the events exchange and the grouped exchange
(docs/adr/0115) through a test queue each."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson
import pika
import psycopg
import pytest
from psycopg.rows import dict_row

from services.core.events import GROUP_CONTENT_TYPE, split_group
from services.core.topology import Topology
from testkit import resources
from testkit.infra import Infra
from testkit.processes import Process, Processes

RELAY_ENV = {"WALFEED_RELAY_METRICS_PORT": "0", "WALFEED_RELAY_STATUS_INTERVAL": "1",
             "WALFEED_RELAY_STANDBY_INTERVAL": "0.5"}

_INSERT = """
INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
SELECT gen_random_uuid(), 'post', g::text, 'post.created', jsonb_build_object('post_id', g, 'author_id', 1)
FROM generate_series(1, %s) AS g
RETURNING id
"""
_CHECKPOINT = """
SELECT system_identifier, timeline, snapshot_xmin::text::bigint AS xmin, pg_wal_lsn_diff(lsn, '0/0')::bigint AS lsn
FROM relay_checkpoints WHERE slot = %s
"""


def write_events(database_url: str, count: int, per_txn: int = 1) -> list[str]:
    """`count` post.created outbox rows in transactions of `per_txn` rows; returns their ids."""
    ids: list[str] = []
    with psycopg.connect(database_url) as conn:
        while len(ids) < count:
            with conn.transaction():
                rows = conn.execute(_INSERT, (min(per_txn, count - len(ids)),)).fetchall()
            ids.extend(str(r[0]) for r in rows)
    return ids


def slot_lsn(database_url: str, slot: str) -> int:
    with psycopg.connect(database_url, autocommit=True) as conn:
        row = conn.execute("SELECT pg_wal_lsn_diff(confirmed_flush_lsn, '0/0')::bigint FROM pg_replication_slots "
                           "WHERE slot_name = %s", (slot,)).fetchone()
    assert row is not None
    return int(row[0])


def current_lsn(database_url: str) -> int:
    with psycopg.connect(database_url, autocommit=True) as conn:
        row = conn.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint").fetchone()
    assert row is not None
    return int(row[0])


def checkpoint(database_url: str, slot: str) -> dict[str, Any] | None:
    """The relay's failover checkpoint of `slot` (relay_checkpoints, docs/adr/0091), if it has a row."""
    with psycopg.connect(database_url, autocommit=True, row_factory=dict_row) as conn:
        return conn.execute(_CHECKPOINT, (slot,)).fetchone()


def checkpointed(database_url: str, slot: str) -> bool:
    """The relay recorded a checkpoint of `slot` (a row only waiting for its first watermark is not one)."""
    found = checkpoint(database_url, slot)
    return found is not None and found["xmin"] is not None


@dataclass
class Received:
    body: bytes
    properties: pika.BasicProperties
    routing_key: str


@dataclass
class Watcher:
    """Everything published to the events exchange (`messages`), through `{prefix}.test.all` bound to `#` there,
    and to the grouped exchange (`grouped`), through `{prefix}.test.grouped`, as walfeed's own queues see it: bound
    to `#`, so that no fan-out event is unroutable there (the relay holds its position until one is taken)."""

    conn: pika.BlockingConnection
    messages: list[Received] = field(default_factory=list)
    grouped: list[Received] = field(default_factory=list)

    def pump(self, budget: float = 1.0) -> int:
        """Consume what is there (for up to `budget` seconds while messages keep coming)."""
        deadline = time.monotonic() + budget
        while True:
            before = len(self.messages) + len(self.grouped)
            self.conn.process_data_events(time_limit=0.05)
            if len(self.messages) + len(self.grouped) == before or time.monotonic() > deadline:
                return len(self.messages)

    def ids(self) -> list[str]:
        return [str(m.properties.message_id) for m in self.messages]

    def has_all(self, expected: set[str]) -> bool:
        self.pump()
        return expected.issubset(self.ids())

    def event_ids(self) -> list[str]:
        """The ids of the events received on the events exchange (each event of a group's message apart, should the
        exchange carry one: it never does, ADR 0115)."""
        return [i for m in self.messages for i in resources.event_ids(m.properties, m.body)]

    def grouped_event_ids(self) -> list[str]:
        """The ids of the events received on the grouped exchange, each event of a group apart (docs/adr/0095)."""
        return [i for m in self.grouped for i in resources.event_ids(m.properties, m.body)]

    def has_all_events(self, expected: set[str]) -> bool:
        self.pump()
        return expected.issubset(self.event_ids())

    def has_all_grouped(self, expected: set[str]) -> bool:
        """Every event of `expected` came to walfeed's own consumers (the grouped exchange)."""
        self.pump()
        return expected.issubset(self.grouped_event_ids())


def bodies(message: Received) -> list[bytes]:
    """The bodies of the events a message carries: a group's (WALFEED_RELAY_GROUP_MAX above 1), or its own."""
    if message.properties.content_type == GROUP_CONTENT_TYPE:
        return split_group(message.body)
    return [message.body]


@pytest.fixture
def watcher(infra: Infra, topology: Topology) -> Iterator[Watcher]:
    conn = pika.BlockingConnection(pika.URLParameters(infra.amqp_url))
    channel = conn.channel()
    channel.basic_qos(prefetch_count=2000)
    watch = Watcher(conn)
    queues = {topology.events_exchange: (f"{topology.prefix}.test.all", watch.messages),
              topology.grouped_exchange: (f"{topology.prefix}.test.grouped", watch.grouped)}
    for exchange, (queue, into) in queues.items():
        channel.exchange_declare(exchange, exchange_type="topic", durable=True)
        channel.queue_declare(queue, auto_delete=False)
        channel.queue_bind(queue, exchange, "#")

        def on_message(_ch: object, method: pika.spec.Basic.Deliver, props: pika.BasicProperties, body: bytes,
                       into: list[Received] = into) -> None:
            into.append(Received(body, props, str(method.routing_key)))

        channel.basic_consume(queue, on_message, auto_ack=True)
    yield watch
    try:
        for queue, _ in queues.values():
            channel.queue_delete(queue)
        conn.close()
    except pika.exceptions.AMQPError:
        pass


class StartRelay(Protocol):
    def __call__(self, name: str = "relay", **env: str) -> Process: ...


@pytest.fixture
def start_relay(processes: Processes) -> StartRelay:
    """Starts `walfeed relay` as a real process, with the test's environment plus `env`."""
    def start(name: str = "relay", **env: str) -> Process:
        return processes.start(name, "relay", env={**RELAY_ENV, **env})
    return start


def new_id() -> str:
    return str(uuid.uuid4())


def assert_published_as_spec(watcher: Watcher, event_id: str) -> None:
    """The message of an event written by write_events, as docs/events.md says, whichever source sent it."""
    message = next(m for m in watcher.messages if m.properties.message_id == event_id)
    body = orjson.loads(message.body)
    assert body["id"] == event_id
    assert body["type"] == "post.created" and message.routing_key == "post.created"
    assert body["aggregate_type"] == "post" and body["aggregate_id"] == "1"
    assert body["payload"] == {"post_id": 1, "author_id": 1}
    assert body["occurred_at"].endswith("Z")
    props = message.properties
    assert props.type == "post.created" and props.content_type == "application/json"
    assert props.delivery_mode == 2 and isinstance(props.timestamp, int)
