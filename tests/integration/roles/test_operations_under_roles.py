"""The operations commands with least privilege: `walfeed dead` needs nothing but the worker's broker user
(docs/operations.md), or for a delivery channel's letters the delivery worker's role and broker user (ADR 0070),
and `walfeed prune-outbox` nothing but the relay's database role (ADR 0071)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from datetime import UTC, datetime

import pika
import psycopg
import pytest

from services.consumer import broker, outcomes
from services.consumer.settler import Settler
from services.core.events import Event, encode
from services.core.topology import Topology
from services.delivery import broker as delivery_broker
from testkit.infra import Infra
from tests.integration.roles.conftest import RoleEnv

pytestmark = pytest.mark.integration


def _walfeed(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "services.cli", *args], env={**os.environ, **env}, text=True,
                          capture_output=True, timeout=120, stdin=subprocess.DEVNULL)


def test_dead_letters_are_replayed_with_the_workers_broker_user_and_pruned_with_the_relays_role(
        role_env: RoleEnv, infra: Infra, topology: Topology, database_url: str) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(infra.amqp_url))
    try:
        channel = conn.channel()
        broker.declare(channel, topology.fanout)
        channel.confirm_delivery()
        event = Event(uuid.uuid4(), "post.created", "post", "1", datetime.now(UTC), {"post_id": 1, "author_id": 2})
        props = pika.BasicProperties(message_id=str(event.id), type=event.type, delivery_mode=2)
        dead = outcomes.Dead("malformed: test", 1)
        assert Settler(channel, broker.EventQueues(topology.fanout), park_ms=0).publish(dead, encode(event), props, {})

        worker = role_env("worker")
        listed = _walfeed(worker, "dead", "ls")
        assert listed.returncode == 0 and "malformed: test" in listed.stdout, listed.stderr
        replayed = _walfeed(worker, "dead", "replay")
        assert replayed.returncode == 0 and "1 of 1 replayed" in replayed.stderr, replayed.stderr
        method, copy, _ = channel.basic_get(topology.fanout_queue, auto_ack=True)
        assert method is not None and copy.message_id == str(event.id)
    finally:
        conn.close()

    with psycopg.connect(database_url, autocommit=True) as db:
        db.execute("INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, published_at) "
                   "VALUES (gen_random_uuid(), 'post', '1', 'post.created', '{}', now() - interval '2 days')")
    pruned = _walfeed(role_env("relay"), "prune-outbox", "--older-than", "1d", "--wait", "0")
    assert pruned.returncode == 0 and "1 published by the poller deleted" in pruned.stdout, pruned.stderr


def test_a_dead_delivery_is_replayed_with_the_delivery_workers_role_and_broker_user(
        role_env: RoleEnv, infra: Infra, topology: Topology, database_url: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as db:
        user = db.execute("INSERT INTO users (handle, token_hash) VALUES ('dead_owner', sha256('x')) "
                          "RETURNING id").fetchone()
        assert user is not None
        row = db.execute("INSERT INTO deliveries (channel, recipient_id, status, attempts) "
                         "VALUES ('email', %s, 'DEAD', 4) RETURNING id", (user[0],)).fetchone()
        assert row is not None
    delivery_id = int(row[0])
    conn = pika.BlockingConnection(pika.URLParameters(infra.amqp_url))
    try:
        channel = conn.channel()
        delivery_broker.declare(channel, topology, "email", 100)
        channel.confirm_delivery()
        event = Event.new("delivery.email", delivery_id, {"delivery_id": delivery_id})
        props = pika.BasicProperties(message_id=str(event.id), type=event.type, delivery_mode=2)
        email = delivery_broker.DeliveryQueues(topology, "email", 100)
        assert Settler(channel, email, park_ms=0).publish(outcomes.Dead("SMTP 550", 4), encode(event), props, {})

        replayed = _walfeed(role_env("delivery"), "dead", "replay", "--queue", "deliveries.email.dead")
        assert replayed.returncode == 0 and "1 of 1 replayed" in replayed.stderr, replayed.stderr
        method, copy, _ = channel.basic_get(topology.delivery_queue("email"), auto_ack=True)
        assert method is not None and copy.message_id == str(event.id)
        assert "x-walfeed-attempts" not in copy.headers and copy.headers["x-walfeed-replays"] == 1
    finally:
        conn.close()
    with psycopg.connect(database_url) as db:
        assert db.execute("SELECT status, attempts FROM deliveries WHERE id = %s",
                          (delivery_id,)).fetchone() == ("PENDING", 0)


def test_a_dead_queue_another_broker_user_declared_is_reported_as_not_readable(
        role_env: RoleEnv, infra: Infra, topology: Topology) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(infra.amqp_url))
    try:
        channel = conn.channel()
        delivery_broker.declare(channel, topology, "webhook", 100)
        channel.confirm_delivery()
        event = Event.new("delivery.webhook", 1, {"delivery_id": 1})
        props = pika.BasicProperties(message_id=str(event.id), type=event.type)
        webhook = delivery_broker.DeliveryQueues(topology, "webhook", 100)
        assert Settler(channel, webhook, park_ms=0).publish(outcomes.Dead("HTTP 400", 1), encode(event), props, {})
    finally:
        conn.close()
    worker = role_env("worker")
    asked = _walfeed(worker, "dead", "ls", "--queue", "deliveries.webhook.dead")
    assert asked.returncode == 1 and "this broker user may not read it" in asked.stderr, asked
    every = _walfeed(worker, "dead", "ls")
    assert every.returncode == 0 and f"{topology.delivery_dead_queue('webhook')}: this broker user" in every.stderr
