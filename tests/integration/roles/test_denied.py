"""What each role may not do: the database and the broker refuse it (ADR 0060)."""

from __future__ import annotations

from datetime import timedelta
from typing import LiteralString

import pika
import pika.exceptions
import psycopg
import pytest

from services.cli.roles import RoleSettings
from services.consumer import broker
from services.core import retention_sql, slots
from services.core.amqp import declare_delivery_queues
from services.core.topology import Topology
from testkit.infra import Infra
from tests.integration.roles.conftest import RoleEnv

pytestmark = pytest.mark.integration

DENIED: dict[str, list[LiteralString]] = {
    "api": [
        "DELETE FROM timelines",
        "SELECT rolpassword FROM pg_authid",
        "UPDATE users SET timeline_floor = 0",
        "UPDATE posts SET fanned_out = true",
        "SELECT * FROM processed_events",
        "SELECT * FROM outbox",
        "CREATE TABLE mine (x int)",
        "UPDATE notifications SET withdrawn_at = now()",
        "DELETE FROM notifications",
        "UPDATE deliveries SET last_status_code = 200",
        # webhook signing secrets: written by the api, read only by the delivery role (docs/adr/0105)
        "SELECT secret FROM webhooks",
        "SELECT previous_secret FROM webhooks",
        "SELECT * FROM webhooks",
        "UPDATE webhooks SET previous_secret = secret",
        "UPDATE webhooks SET url = 'https://attacker.example'",
        # search reads vectors; only the embedder writes them (and the owner's tombstone trigger)
        "INSERT INTO post_embeddings (post_id, model, dimension, vector) VALUES (1, 'm', 1, '\\x00000000')",
        "UPDATE post_embeddings SET vector = NULL",
        "DELETE FROM post_embeddings",
    ],
    "relay": [
        "SELECT * FROM users",
        "DELETE FROM outbox",
        "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) "
        "VALUES (gen_random_uuid(), 'post', '1', 'post.deleted', '{}')",
    ],
    "worker": [
        "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) "
        "VALUES (gen_random_uuid(), 'post', '1', 'post.deleted', '{}')",
        "UPDATE posts SET body = 'forged'",
        "DELETE FROM posts",
        "UPDATE users SET token_hash = 'x'",
        "TRUNCATE timelines",
        "SELECT rolpassword FROM pg_authid",
        "SELECT * FROM webhooks",
    ],
    "notifier": [
        "SELECT secret FROM webhooks",
        "SELECT previous_secret FROM webhooks",
        "SELECT token_hash FROM users",
        "SELECT * FROM timelines",
        "UPDATE posts SET body = 'forged'",
        "DELETE FROM notifications",
        "UPDATE deliveries SET attempts = 0",
        "UPDATE webhooks SET disabled_at = now()",
        "DELETE FROM outbox",
        "SELECT * FROM walfeed_rotate_webhook_secret(1, 1, 'whsec_forged', 0)",
    ],
    "delivery": [
        "UPDATE webhooks SET secret = 'whsec_forged'",
        "UPDATE webhooks SET url = 'https://attacker.example'",
        "UPDATE deliveries SET recipient_id = 1",
        "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) "
        "VALUES (gen_random_uuid(), 'delivery', '1', 'delivery.webhook', '{}')",
        "UPDATE users SET email = 'attacker@example.com'",
        "SELECT * FROM timelines",
        "DELETE FROM deliveries",
        "SELECT token_hash FROM users",
        "SELECT * FROM walfeed_rotate_webhook_secret(1, 1, 'whsec_forged', 0)",
    ],
    "embedder": [  # bodies and its own vectors only (020_search.sql)
        "UPDATE posts SET body = 'forged'",
        "UPDATE posts SET deleted_at = NULL",
        "SELECT author_id FROM posts",
        "SELECT token_hash FROM users",
        "DELETE FROM post_embeddings",
        "UPDATE post_embeddings SET post_id = 1",
        "SELECT * FROM timelines",
        "SELECT * FROM outbox",
    ],
}


@pytest.mark.parametrize("process", DENIED)
def test_the_database_refuses_what_a_role_does_not_need(role_env: RoleEnv, process: str) -> None:
    allowed = []
    with psycopg.connect(role_env(process)["WALFEED_DATABASE_URL"], autocommit=True) as conn:
        for statement in DENIED[process]:
            try:
                conn.execute(statement)
                allowed.append(statement)
            except psycopg.errors.InsufficientPrivilege:
                pass
    assert allowed == []


def test_the_relay_role_reads_its_slot_position_and_lag(role_env: RoleEnv, slot_name: str) -> None:
    """The slot lookup the relay runs beside the stream and in its lag probe (services/core/slots.py): it reads
    pg_replication_slots and WAL positions, open to every role."""
    with psycopg.connect(role_env("relay")["WALFEED_DATABASE_URL"], autocommit=True) as conn:
        slot = slots.find(conn.cursor(), slot_name)
    assert slot is not None and slot.lag_bytes is not None


def test_the_relay_role_prunes_through_the_retention_functions_only(role_env: RoleEnv, slot_name: str) -> None:
    """The pruning timer's statements run as the relay (ADR 0071); the rows themselves stay out of its reach (the
    DELETE in DENIED), and no other role may run the functions."""
    with psycopg.connect(role_env("relay")["WALFEED_DATABASE_URL"], autocommit=True) as conn:
        assert conn.execute(retention_sql.WATERMARK, {"slot": slot_name, "record": True}).fetchone() == (1,)
        assert conn.execute(retention_sql.PRUNE_BATCH, {"slot": slot_name, "older_than": timedelta(days=1),
                                                        "batch": 10}).fetchone() == (0, 0, 0)
        conn.execute(retention_sql.SIZES).fetchall()
        conn.execute(retention_sql.OLDEST_UNPUBLISHED).fetchall()
    for process in ("api", "worker"):
        with psycopg.connect(role_env(process)["WALFEED_DATABASE_URL"], autocommit=True) as conn, \
                pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(retention_sql.PRUNE_BATCH, {"slot": slot_name, "older_than": timedelta(0), "batch": 10})


def test_roles_have_no_admin_attributes_and_a_statement_timeout(role_env: RoleEnv,
                                                                  role_settings: RoleSettings) -> None:
    roles = role_settings.roles
    with psycopg.connect(role_env("api")["WALFEED_DATABASE_URL"], autocommit=True) as conn:
        rows = conn.execute(
            "SELECT rolname, rolsuper, rolcreatedb, rolcreaterole, rolcanlogin, rolreplication, rolbypassrls, "
            "rolconfig FROM pg_roles WHERE rolname LIKE %s", (f"{roles.prefix}\\_%",)).fetchall()
        assert conn.execute("SHOW statement_timeout").fetchone() == ("5s",)
    by_name = {r[0]: r[1:] for r in rows}
    assert by_name == {
        roles.owner: (False, False, False, False, False, False, None),
        roles.login("api"): (False, False, False, True, False, False, ["statement_timeout=5s"]),
        roles.login("relay"): (False, False, False, True, True, False, ["statement_timeout=30s"]),
        roles.login("worker"): (False, False, False, True, False, False, ["statement_timeout=60s"]),
        roles.login("notifier"): (False, False, False, True, False, False, ["statement_timeout=30s"]),
        roles.login("delivery"): (False, False, False, True, False, False, ["statement_timeout=10s"]),
        roles.login("embedder"): (False, False, False, True, False, False, ["statement_timeout=30s"]),
    }


def _channel(url: str) -> tuple[pika.BlockingConnection, pika.adapters.blocking_connection.BlockingChannel]:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    return conn, conn.channel()


def test_the_worker_cannot_publish_events_and_the_relay_cannot_consume(
        role_env: RoleEnv, infra: Infra, topology: Topology) -> None:
    admin, channel = _channel(infra.amqp_url)
    broker.declare(channel, topology.fanout)  # the worker's topology, as the worker declares it
    admin.close()

    conn, channel = _channel(role_env("worker")["WALFEED_AMQP_URL"])
    try:
        broker.declare(channel, topology.fanout)  # allowed: its own names
        channel.confirm_delivery()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
            channel.basic_publish(topology.events_exchange, "post.deleted", b"{}")
        assert refused.value.reply_code == 403
        channel = conn.channel()
        channel.confirm_delivery()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:  # nor walfeed's copies (ADR 0115)
            channel.basic_publish(topology.grouped_exchange, "post.deleted", b"{}")
        assert refused.value.reply_code == 403
        channel = conn.channel()
        channel.confirm_delivery()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:  # into any queue by its name
            channel.basic_publish("", "some.other.queue", b"{}")
        assert refused.value.reply_code == 403
    finally:
        conn.close()

    conn, channel = _channel(role_env("relay")["WALFEED_AMQP_URL"])
    try:
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
            channel.basic_consume(topology.fanout_queue, lambda *_: None)
        assert refused.value.reply_code == 403
        channel = conn.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
            channel.basic_publish("", topology.fanout_queue, b"{}")  # the default exchange
            channel.queue_declare(topology.fanout_queue, passive=True)  # a round trip: the refusal arrives
        assert refused.value.reply_code == 403
    finally:
        conn.close()


def test_the_notifier_declares_its_queues_and_the_delivery_queues_but_cannot_read_deliveries_or_publish(
        role_env: RoleEnv, topology: Topology) -> None:
    conn, channel = _channel(role_env("notifier")["WALFEED_AMQP_URL"])
    try:
        broker.declare(channel, topology.notifier)  # allowed: its own names
        declare_delivery_queues(channel, topology)  # allowed: so delivery events are never unroutable
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
            channel.basic_consume(topology.delivery_queue("webhook"), lambda *_: None)
        assert refused.value.reply_code == 403
        channel = conn.channel()
        channel.confirm_delivery()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
            channel.basic_publish(topology.events_exchange, "delivery.webhook", b"{}")
        assert refused.value.reply_code == 403
        channel = conn.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
            channel.basic_consume(topology.fanout_queue, lambda *_: None)
        assert refused.value.reply_code == 403
    finally:
        conn.close()
