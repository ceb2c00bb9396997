"""Per-test resources on the shared servers: a database cloned from a migrated template, a slot, an AMQP prefix."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator

import orjson
import pika
import pika.exceptions
import psycopg
from psycopg import sql

from services.core import events
from services.core.migrate import apply_schema, ensure_slot
from services.core.topology import Topology
from testkit.infra import Infra


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


@contextlib.contextmanager
def template_database(infra: Infra) -> Iterator[str]:
    """A database with the schema applied, to clone per test (CREATE DATABASE ... TEMPLATE is fast)."""
    name = unique("walfeed_tpl")
    _create(infra, name)
    try:
        apply_schema(infra.db_url(name))
        yield name
    finally:
        drop_database(infra, name)


@contextlib.contextmanager
def test_database(infra: Infra, template: str, slot: str) -> Iterator[str]:
    """A fresh database cloned from `template`, with its own logical slot. Yields the URL."""
    name = unique("walfeed_t")
    _create(infra, name, template)
    url = infra.db_url(name)
    try:
        ensure_slot(url, slot)
        yield url
    finally:
        drop_database(infra, name)


def _create(infra: Infra, name: str, template: str | None = None) -> None:
    stmt = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
    if template:
        stmt = sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(name), sql.Identifier(template))
    with psycopg.connect(infra.pg_admin_url, autocommit=True) as conn:
        conn.execute(stmt)


def drop_database(infra: Infra, name: str) -> None:
    """Drop the database and every slot in it (terminating whatever still streams from them)."""
    with psycopg.connect(infra.pg_admin_url, autocommit=True) as conn:
        for _ in range(50):
            conn.execute(
                "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
                "WHERE database = %s AND active_pid IS NOT NULL", (name,))
            slots = conn.execute("SELECT slot_name FROM pg_replication_slots WHERE database = %s AND NOT active",
                                 (name,)).fetchall()
            for (slot,) in slots:
                with contextlib.suppress(psycopg.errors.UndefinedObject, psycopg.errors.ObjectInUse):
                    conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
            if not conn.execute("SELECT 1 FROM pg_replication_slots WHERE database = %s", (name,)).fetchone():
                break
            conn.execute("SELECT pg_sleep(0.1)")  # a terminated walsender takes a moment to release its slot
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def declare_observer(amqp_url: str, topology: Topology, suffix: str = "observe", durable: bool = True,
                     exchange: str | None = None) -> str:
    """A queue `{prefix}.test.<suffix>` bound to `#` on `exchange` (default: the events exchange, where it sees every
    event alone; the grouped exchange: every fan-out event, as walfeed's queues get them, docs/adr/0115) and, durable,
    survives a broker restart (not durable, the broker keeps its messages off disk: the relay benchmark's counter).
    Declare it before the relay starts (else a delivery event, or on the grouped exchange a fan-out one, is
    unroutable); delete it with delete_amqp_names."""
    queue = f"{topology.prefix}.test.{suffix}"
    exchange = exchange or topology.events_exchange
    conn = pika.BlockingConnection(pika.URLParameters(amqp_url))
    try:
        channel = conn.channel()
        channel.exchange_declare(exchange, exchange_type="topic", durable=True)
        channel.queue_declare(queue, durable=durable)
        channel.queue_bind(queue, exchange, "#")
    finally:
        conn.close()
    return queue


def event_ids(props: pika.BasicProperties, body: bytes) -> list[str]:
    """The ids of the events a message of either exchange carries, as an observer counts them: each event of a
    group apart (WALFEED_RELAY_GROUP_MAX above 1, docs/events.md "Groups"), else the message's id (its body when it
    has none: an injected poison)."""
    whole = [props.message_id or body.decode(errors="replace")]
    if props.content_type != events.GROUP_CONTENT_TYPE:
        return whole
    try:
        parts = [orjson.loads(part) for part in events.split_group(body)]
    except events.MalformedEvent:
        return whole
    return [str(p["id"]) if isinstance(p, dict) and "id" in p else orjson.dumps(p).decode() for p in parts]


def delete_amqp_names(amqp_url: str, topology: Topology, extra_queues: list[str]) -> None:
    """Remove every exchange and queue a test created under its prefix."""
    try:
        conn = pika.BlockingConnection(pika.URLParameters(amqp_url))
    except pika.exceptions.AMQPError:
        return  # the broker is down (a test stopped it); names die with a fresh broker or the next cleanup
    try:
        channel = conn.channel()
        for queue in [*topology.queues(), *topology.notifier.queues(), *topology.all_delivery_queues(),
                      topology.embedder_queue, *extra_queues]:
            channel.queue_delete(queue)
        for exchange in {*topology.exchanges(), *topology.notifier.exchanges(), topology.delivery_settle_exchange}:
            channel.exchange_delete(exchange)
    finally:
        with contextlib.suppress(pika.exceptions.AMQPError):
            conn.close()
