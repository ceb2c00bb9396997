"""The operations commands with least privilege: `walfeed dead` needs nothing but the worker's broker user
(docs/operations.md), and `walfeed prune-outbox` nothing but the relay's database role (ADR 0071)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from datetime import UTC, datetime

import pika
import psycopg
import pytest

from services.core.events import Event, encode
from services.core.topology import Topology
from services.worker import broker, policy
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
        broker.publish_outcome(channel, topology.fanout, policy.Dead("malformed: test", 1), encode(event), props)

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
