"""Each process works under its own role, and the broker and the database see only those roles (ADR 0060)."""

from __future__ import annotations

import uuid

import httpx
import orjson
import pika
import psycopg
import pytest

from services.cli.roles import RoleSettings
from services.core import signing
from services.core.topology import Topology
from testkit.infra import Infra
from testkit.processes import Processes, free_port
from testkit.resources import declare_observer
from testkit.waiting import eventually
from tests.integration.roles.conftest import RoleEnv

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

QUIET = {"WALFEED_RELAY_METRICS_PORT": "0", "WALFEED_WORKER_METRICS_PORT": "0", "WALFEED_NOTIFIER_METRICS_PORT": "0"}


def sessions(database_url: str) -> set[str]:
    """The roles connected to this database, other than this probe's."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        rows = conn.execute("SELECT DISTINCT usename FROM pg_stat_activity WHERE datname = current_database() "
                            "AND pid <> pg_backend_pid() AND usename IS NOT NULL").fetchall()
    return {r[0] for r in rows}


def test_api_relay_and_worker_deliver_a_post_each_under_its_role(
        processes: Processes, role_env: RoleEnv, role_settings: RoleSettings, database_url: str) -> None:
    port = free_port()
    processes.start("worker", "worker", env={**role_env("worker"), **QUIET})
    processes.start("relay", "relay", env={**role_env("relay"), **QUIET})
    processes.start("api", "api", "--port", str(port), env=role_env("api"))
    base = f"http://127.0.0.1:{port}"
    eventually(lambda: httpx.get(f"{base}/readyz").status_code == 200, timeout=60, what="api ready")
    with httpx.Client(base_url=base, timeout=10) as api:
        alice, bob = (api.post("/v1/users", json={"handle": h}).json() for h in ("alice", "bob"))
        bob_auth = {"Authorization": f"Bearer {bob['token']}"}
        assert api.put(f"/v1/following/{alice['id']}", headers=bob_auth).status_code == 204
        post = api.post("/v1/posts", json={"body": "least privilege"},
                        headers={"Authorization": f"Bearer {alice['token']}"}).json()
        # Fanned out by the worker (the post's decision recorded), not merged in at read time.
        eventually(lambda: _fanned_out(database_url, post["id"]), timeout=60, what="post fanned out")
        items = api.get("/v1/timeline", headers=bob_auth).json()["items"]
        assert [i["id"] for i in items] == [post["id"]], processes.logs()
    roles = role_settings.roles
    assert sessions(database_url) == {roles.login("api"), roles.login("relay"), roles.login("worker")}


def _fanned_out(database_url: str, post_id: int) -> bool:
    with psycopg.connect(database_url, autocommit=True) as conn:
        row = conn.execute("SELECT fanned_out FROM posts WHERE id = %s", (post_id,)).fetchone()
    return row is not None and row[0] is True


def test_polling_relay_claims_publishes_and_marks_under_the_relay_role(
        processes: Processes, role_env: RoleEnv, infra: Infra, topology: Topology, database_url: str,
        amqp_extra_queues: list[str]) -> None:
    observer = declare_observer(infra.amqp_url, topology)
    # Walfeed's queues' copy on the grouped exchange (docs/adr/0115): marked published only once it is taken too.
    grouped = declare_observer(infra.amqp_url, topology, "grouped", exchange=topology.grouped_exchange)
    amqp_extra_queues.extend([observer, grouped])
    event_id = uuid.uuid4()
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) "
                     "VALUES (%s, 'post', '1', 'post.created', '{\"post_id\": 1, \"author_id\": 1}')", (event_id,))
    relay = processes.start("relay", "relay", "--source", "poll",
                            env={**role_env("relay"), **QUIET, "WALFEED_POLL_INTERVAL": "0.1"})
    conn = pika.BlockingConnection(pika.URLParameters(infra.amqp_url))
    try:
        channel = conn.channel()
        body = eventually(lambda: _get(channel, observer), timeout=30, what="event published")
        assert body is not None
        assert orjson.loads(body)["id"] == str(event_id), relay.log()
        copy = eventually(lambda: _get(channel, grouped), timeout=30, what="event published for walfeed's queues")
        assert copy == body
    finally:
        conn.close()
    eventually(lambda: _published(database_url, event_id), timeout=30, what="outbox row marked published")


def _get(channel: pika.adapters.blocking_connection.BlockingChannel, queue: str) -> bytes | None:
    method, _props, body = channel.basic_get(queue, auto_ack=True)
    return None if method is None else bytes(body)


def _published(database_url: str, event_id: uuid.UUID) -> bool:
    with psycopg.connect(database_url, autocommit=True) as conn:
        row = conn.execute("SELECT published_at IS NOT NULL FROM outbox WHERE id = %s", (event_id,)).fetchone()
    return bool(row and row[0])


def test_the_notifier_notifies_a_mention_and_writes_its_delivery_under_its_role(
        processes: Processes, role_env: RoleEnv, role_settings: RoleSettings, database_url: str, infra: Infra,
        topology: Topology) -> None:
    port = free_port()
    processes.start("notifier", "notifier", env={**role_env("notifier"), **QUIET})
    processes.start("relay", "relay", env={**role_env("relay"), **QUIET})
    processes.start("api", "api", "--port", str(port),
                    env={**role_env("api"), "WALFEED_WEBHOOK_ALLOWED_NETWORKS": "127.0.0.0/8",
                         "WALFEED_WEBHOOK_ALLOW_HTTP": "true"})
    base = f"http://127.0.0.1:{port}"
    eventually(lambda: httpx.get(f"{base}/readyz").status_code == 200, timeout=60, what="api ready")
    with httpx.Client(base_url=base, timeout=10) as api:
        alice, bob = (api.post("/v1/users", json={"handle": h}).json() for h in ("alice", "bob"))
        bob_auth = {"Authorization": f"Bearer {bob['token']}"}
        hook = api.post("/v1/webhooks", json={"url": "http://127.0.0.1:9/hook", "events": ["mention"]},
                        headers=bob_auth)
        assert hook.status_code == 201, hook.text
        api.post("/v1/posts", json={"body": "hi @bob"}, headers={"Authorization": f"Bearer {alice['token']}"})
        found = eventually(lambda: api.get("/v1/notifications", headers=bob_auth).json()["items"], timeout=60,
                           what="bob's mention notification")
        assert [(n["kind"], n["actor_id"]) for n in found] == [("mention", alice["id"])], processes.logs()
    conn = pika.BlockingConnection(pika.URLParameters(infra.amqp_url))
    try:  # the delivery event went through the relay into the delivery queue the notifier declared
        body = eventually(lambda: _get(conn.channel(), topology.delivery_queue("webhook")), timeout=60,
                          what="delivery.webhook event routed")
    finally:
        conn.close()
    assert body is not None and orjson.loads(body)["type"] == "delivery.webhook"
    assert role_settings.roles.login("notifier") in sessions(database_url)


def test_the_delivery_worker_delivers_a_webhook_under_its_role(
        processes: Processes, role_env: RoleEnv, role_settings: RoleSettings, database_url: str) -> None:
    from tests.integration.delivery import receiver as receiver_mod
    from tests.integration.delivery import world
    from tests.integration.delivery.conftest import DELIVER_ENV

    with receiver_mod.running([signing.generate_secret()]) as receiver, psycopg.connect(database_url) as db:
        owner = world.user(db, "owner")
        hook = world.webhook(db, owner, receiver.url("/role"), receiver.secrets[0])
        processes.start("deliver", "deliver", "--channel", "webhook", env={**role_env("delivery"), **DELIVER_ENV})
        processes.start("relay", "relay", env={**role_env("relay"), **QUIET})
        delivery_id = world.notify(db, owner, world.user(db, "actor"), webhook_id=hook, kind="follow")
        eventually(lambda: world.delivery(db, delivery_id)["status"] == "DELIVERED", timeout=60,
                   what="delivered under the delivery role")
        assert receiver.to("/role")[0].verified_by == (0,)
    roles = role_settings.roles
    assert roles.login("delivery") in sessions(database_url)


def test_webhooks_are_created_rotated_and_pinged_by_the_api_and_signed_by_the_delivery_role(
        processes: Processes, role_env: RoleEnv) -> None:
    """The api role never reads a signing secret (docs/adr/0105): it generates one and shows it once, rotates
    through the owner's function, pings; the delivery role reads both secrets and signs with each."""
    from tests.integration.delivery import receiver as receiver_mod
    from tests.integration.delivery.conftest import DELIVER_ENV

    port = free_port()
    processes.start("relay", "relay", env={**role_env("relay"), **QUIET})
    processes.start("deliver", "deliver", "--channel", "webhook", env={**role_env("delivery"), **DELIVER_ENV})
    processes.start("api", "api", "--port", str(port),
                    env={**role_env("api"), "WALFEED_WEBHOOK_ALLOWED_NETWORKS": "127.0.0.0/8",
                         "WALFEED_WEBHOOK_ALLOW_HTTP": "true"})
    base = f"http://127.0.0.1:{port}"
    eventually(lambda: httpx.get(f"{base}/readyz").status_code == 200, timeout=60, what="api ready")
    with receiver_mod.running([]) as receiver, httpx.Client(base_url=base, timeout=10) as api:
        bob = api.post("/v1/users", json={"handle": "bob"}).json()
        auth = {"Authorization": f"Bearer {bob['token']}"}
        created = api.post("/v1/webhooks", json={"url": receiver.url("/hook"), "events": ["mention"]}, headers=auth)
        assert created.status_code == 201, created.text
        receiver.secrets.append(created.json()["secret"])
        hook = created.json()["id"]
        assert api.post(f"/v1/webhooks/{hook}/ping", headers=auth).status_code == 202
        first = eventually(lambda: receiver.to("/hook"), timeout=60, what="the ping delivered")
        assert first[0].verified_by == (0,), processes.logs()
        rotated = api.post(f"/v1/webhooks/{hook}/rotate-secret", headers=auth)
        assert rotated.status_code == 200 and rotated.json()["previous_secret_expires_at"], rotated.text
        receiver.secrets.append(rotated.json()["secret"])
        assert api.post(f"/v1/webhooks/{hook}/ping", headers=auth).status_code == 202
        second = eventually(lambda: receiver.to("/hook")[1:], timeout=60, what="the second ping delivered")
        assert second[0].verified_by == (0, 1)  # signed by the previous secret and the new one
        assert api.get(f"/v1/webhooks/{hook}", headers=auth).json()["id"] == hook
        assert api.delete(f"/v1/webhooks/{hook}", headers=auth).status_code == 204
    with psycopg.connect(role_env("api")["WALFEED_DATABASE_URL"], autocommit=True) as conn, \
            pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute("SELECT secret FROM webhooks")
