"""Notifications through the real processes: API transaction -> WAL -> relay -> RabbitMQ -> notifier -> in-app
list, with every event also delivered again out of order (as a relay replay after a crash would), and the post's
deletion withdrawing its mention."""

from __future__ import annotations

import signal
from typing import Any

import httpx
import pika
import psycopg
import pytest
from psycopg.rows import dict_row

from services.core import events as ev
from services.core.topology import Topology
from tests.harness.infra import Infra
from tests.harness.processes import Processes, free_port
from tests.harness.waiting import eventually

pytestmark = [pytest.mark.e2e, pytest.mark.integration]


def _signup(api: httpx.Client, handle: str) -> tuple[int, dict[str, str]]:
    body = api.post("/v1/users", json={"handle": handle}).json()
    return body["id"], {"Authorization": f"Bearer {body['token']}"}


def _notifications(api: httpx.Client, auth: dict[str, str]) -> dict[str, Any]:
    reply = api.get("/v1/notifications", headers=auth)
    assert reply.status_code == 200, reply.text
    return reply.json()  # type: ignore[no-any-return]


def _processed(database_url: str) -> int:
    with psycopg.connect(database_url, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM processed_events WHERE consumer = 'notifier'").fetchone()
    return int(row[0]) if row else 0


def _publish_again_newest_first(database_url: str, infra: Infra, topology: Topology) -> int:
    """Every post and follow event of the outbox published once more, newest first: duplicates, reordered."""
    with psycopg.connect(database_url, autocommit=True, row_factory=dict_row) as conn:
        rows = conn.execute("SELECT id, type, aggregatetype, aggregateid, payload, created_at FROM outbox "
                            "WHERE aggregatetype IN ('post', 'follow') ORDER BY created_at DESC, id").fetchall()
    connection = pika.BlockingConnection(pika.URLParameters(infra.amqp_url))
    try:
        channel = connection.channel()
        for r in rows:
            event = ev.Event(r["id"], r["type"], r["aggregatetype"], r["aggregateid"], r["created_at"], r["payload"])
            channel.basic_publish(topology.events_exchange, event.type, ev.encode(event), pika.BasicProperties(
                message_id=str(event.id), type=event.type, content_type=ev.CONTENT_TYPE, delivery_mode=2))
    finally:
        connection.close()
    return len(rows)


def test_a_mention_reaches_the_in_app_list_once_despite_replays_and_a_deletion_withdraws_it(
        processes: Processes, database_url: str, infra: Infra, topology: Topology) -> None:
    port = free_port()
    quiet = {"WALFEED_RELAY_METRICS_PORT": "0", "WALFEED_NOTIFIER_METRICS_PORT": "0"}
    procs = [processes.start("api", "api", "--port", str(port)), processes.start("relay", "relay", env=quiet),
             processes.start("notifier", "notifier", env=quiet)]
    base = f"http://127.0.0.1:{port}"
    eventually(lambda: httpx.get(f"{base}/readyz").status_code == 200, timeout=30, what="api ready")
    with httpx.Client(base_url=base, timeout=10) as api:
        alice, alice_auth = _signup(api, "alice")
        bob, bob_auth = _signup(api, "bob")
        assert api.put(f"/v1/following/{alice}", headers=bob_auth).status_code == 204
        post = api.post("/v1/posts", json={"body": "hello @bob and @BOB, and @nobody"}, headers=alice_auth).json()
        eventually(lambda: _processed(database_url) == 2, timeout=30, what="follow and post processed")
        assert _publish_again_newest_first(database_url, infra, topology) == 2

        eventually(lambda: _notifications(api, bob_auth)["items"], timeout=30, what="bob's mention")
        got = _notifications(api, bob_auth)
        assert [(n["kind"], n["actor_id"], n["post_id"]) for n in got["items"]] == [("mention", alice, post["id"])]
        assert got["unread_count"] == 1
        assert [(n["kind"], n["actor_id"]) for n in _notifications(api, alice_auth)["items"]] == [("follow", bob)]

        assert api.delete(f"/v1/posts/{post['id']}", headers=alice_auth).status_code == 204
        eventually(lambda: _notifications(api, bob_auth) == {"items": [], "next_cursor": None, "unread_count": 0},
                   timeout=30, what="the mention withdrawn")
        eventually(lambda: _processed(database_url) == 3, timeout=30, what="every event processed")
        assert _notifications(api, alice_auth)["unread_count"] == 1  # the replays notified no one twice

    for proc in procs:
        assert proc.stop(signal.SIGTERM, timeout=30) == 0, proc.log()[-3000:]
