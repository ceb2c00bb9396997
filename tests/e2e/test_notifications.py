"""Notifications through the real processes: API transaction -> WAL -> relay -> RabbitMQ -> notifier -> in-app
list, webhook and mailbox (`walfeed deliver`), with every event also delivered again out of order (as a relay replay
after a crash would), and the post's deletion withdrawing its mention."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from typing import Any

import httpx
import pika
import psycopg
import pytest
from psycopg.rows import dict_row

from services.core import events as ev
from services.core import mailtokens
from services.core.topology import Topology
from testkit.infra import Infra
from testkit.processes import Processes, free_port
from testkit.waiting import eventually
from tests.integration.delivery import receiver as receiver_mod
from tests.integration.delivery.test_email import Mailbox, mailbox  # noqa: F401 - the fixture, used below

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
            channel.basic_publish(topology.grouped_exchange, event.type, ev.encode(event), pika.BasicProperties(
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


def _statuses(database_url: str) -> list[tuple[str, str]]:
    with psycopg.connect(database_url, autocommit=True) as conn:
        return [(r[0], r[1]) for r in conn.execute("SELECT channel, status FROM deliveries ORDER BY channel, id")]


@pytest.fixture
def receiver() -> Iterator[receiver_mod.Receiver]:
    with receiver_mod.running([]) as running:  # the secrets come from the API: appended by the test
        yield running


def test_a_mention_reaches_the_webhook_and_the_mailbox_once_and_a_rotated_secret_signs_beside_the_old(
        processes: Processes, database_url: str, infra: Infra, topology: Topology,
        receiver: receiver_mod.Receiver, mailbox: tuple[Mailbox, int]) -> None:  # noqa: F811 - the fixture
    box, smtp_port = mailbox
    port = free_port()
    env = {"WALFEED_RELAY_METRICS_PORT": "0", "WALFEED_NOTIFIER_METRICS_PORT": "0",
           "WALFEED_WEBHOOK_ALLOWED_NETWORKS": "127.0.0.0/8", "WALFEED_WEBHOOK_ALLOW_HTTP": "true",
           "WALFEED_SMTP_URL": f"smtp://127.0.0.1:{smtp_port}", "WALFEED_DELIVERY_RATE": "0",
           "WALFEED_API_PUBLIC_URL": f"http://127.0.0.1:{port}"}
    procs = [processes.start("api", "api", "--port", str(port), env=env), processes.start("relay", "relay", env=env),
             processes.start("notifier", "notifier", env=env),
             processes.start("deliver-webhook", "deliver", "--channel", "webhook", env=env),
             processes.start("deliver-email", "deliver", "--channel", "email", env=env)]
    base = f"http://127.0.0.1:{port}"
    eventually(lambda: httpx.get(f"{base}/readyz").status_code == 200, timeout=30, what="api ready")
    with httpx.Client(base_url=base, timeout=10) as api:
        alice, alice_auth = _signup(api, "alice")
        _, bob_auth = _signup(api, "bob")
        hook = api.post("/v1/webhooks", json={"url": receiver.url("/bob"), "events": ["mention"]}, headers=bob_auth)
        assert hook.status_code == 201, hook.text
        receiver.secrets.append(hook.json()["secret"])
        assert api.patch("/v1/users/me", json={"email": "bob@example.test", "email_kinds": ["mention"]},
                         headers=bob_auth).status_code == 200
        verification = eventually(lambda: box.received, timeout=60, what="the verification mail")[0][1]
        (code,) = [w for w in verification.get_content().split() if mailtokens.parse_verification(w)]
        verified = api.post("/v1/users/me/email/verify", json={"code": code}, headers=bob_auth)
        assert verified.status_code == 200 and verified.json()["email_verified"], verified.text
        box.received.clear()
        post = api.post("/v1/posts", json={"body": "hi @bob"}, headers=alice_auth).json()
        eventually(lambda: _statuses(database_url) == [("email", "DELIVERED"), ("email", "DELIVERED"),
                                                       ("webhook", "DELIVERED")],
                   timeout=60, what="the verification mail and both deliveries made")
        assert _publish_again_newest_first(database_url, infra, topology) == 1
        eventually(lambda: _processed(database_url) == 1 and not _queued(infra, topology), timeout=30,
                   what="the replay handled")

        (request,) = receiver.to("/bob")
        assert request.verified_by == (0,)  # by the standardwebhooks reference library, with the API's secret
        assert request.json["type"] == "notification.mention"
        data: Any = request.json["data"]
        assert (data["actor"]["id"], data["post"]["id"]) == (alice, post["id"])
        ((recipients, message),) = box.received
        assert recipients == ["bob@example.test"] and "@alice" in message.get_content()
        assert message["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
        unsubscribed = api.post(message["List-Unsubscribe"][1:-1], content="List-Unsubscribe=One-Click",
                                headers={"Content-Type": "application/x-www-form-urlencoded"})  # as a mail client
        assert unsubscribed.status_code == 200 and unsubscribed.json() == {"unsubscribed": "mention"}
        assert api.get("/v1/users/me", headers=bob_auth).json()["email_kinds"] == []
        assert [n["post_id"] for n in _notifications(api, bob_auth)["items"]] == [post["id"]]

        rotated = api.post(f"/v1/webhooks/{hook.json()['id']}/rotate-secret", headers=bob_auth).json()
        receiver.secrets.append(rotated["secret"])
        ping = api.post(f"/v1/webhooks/{hook.json()['id']}/ping", headers=bob_auth).json()["delivery_id"]
        eventually(lambda: len(receiver.to("/bob")) == 2, timeout=60, what="the ping received")
        pinged = receiver.to("/bob")[1]
        assert pinged.webhook_id == str(ping) and pinged.verified_by == (0, 1)  # either secret verifies it

    for proc in procs:
        assert proc.stop(signal.SIGTERM, timeout=30) == 0, proc.log()[-3000:]


def _queued(infra: Infra, topology: Topology) -> int:
    connection = pika.BlockingConnection(pika.URLParameters(infra.amqp_url))
    try:
        channel = connection.channel()
        queues = [topology.notifier.queue, topology.notifier.retry_queue,
                  *(topology.delivery_queue(c) for c in ("webhook", "email"))]
        return sum(int(channel.queue_declare(q, passive=True).method.message_count) for q in queues)
    finally:
        connection.close()
