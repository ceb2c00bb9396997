"""The webhooks API: registration with the SSRF check, reading, deletion, secret rotation, ping, deliveries and
their retry, re-enabling; another user's webhook is a 404 everywhere; secrets are shown once and never logged."""

from __future__ import annotations

import logging
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import psycopg
import pytest

from services.api import store
from services.core import ssrf
from tests.integration.api.conftest import Account, SignUp

pytestmark = pytest.mark.integration

Db = psycopg.Connection[dict[str, Any]]
PUBLIC = "https://93.184.216.34/hooks/walfeed"  # a public address literal: no DNS needed


def register(client: httpx.Client, who: Account, url: str = PUBLIC, events: list[str] | None = None) -> dict[str, Any]:
    reply = client.post("/v1/webhooks", json={"url": url, "events": events or ["mention"]}, headers=who.auth)
    assert reply.status_code == 201, reply.text
    return reply.json()  # type: ignore[no-any-return]


def delivery_events(db: Db, delivery_id: int) -> int:
    row = db.execute("SELECT count(*) AS n FROM outbox WHERE type = 'delivery.webhook' AND payload = %s::jsonb",
                     (f'{{"delivery_id": {delivery_id}}}',)).fetchone()
    assert row is not None
    return int(row["n"])


def test_a_webhook_is_registered_with_a_secret_shown_once_and_listed_without_it(
        client: httpx.Client, signup: SignUp, db: Db, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    alice = signup("alice")
    created = register(client, alice, events=["mention", "follow", "mention"])
    secret = created.pop("secret")
    assert secret.startswith("whsec_") and len(secret) > 40
    assert created == {"id": created["id"], "url": PUBLIC, "events": ["mention", "follow"], "enabled": True,
                       "disabled_reason": None, "created_at": created["created_at"],
                       "previous_secret_expires_at": None}
    assert client.get("/v1/webhooks", headers=alice.auth).json() == {"items": [created]}
    assert client.get(f"/v1/webhooks/{created['id']}", headers=alice.auth).json() == created
    stored = db.execute("SELECT secret FROM webhooks WHERE id = %s", (created["id"],)).fetchone()
    assert stored == {"secret": secret}
    rotated = client.post(f"/v1/webhooks/{created['id']}/rotate-secret", headers=alice.auth).json()
    assert "whsec_" not in caplog.text and secret not in caplog.text and rotated["secret"] not in caplog.text


@pytest.mark.parametrize(("url", "why", "logged"), [
    ("http://93.184.216.34/", "https", None), ("https://127.0.0.1/", ssrf.NOT_PUBLIC, "loopback"),
    ("https://10.1.2.3/", ssrf.NOT_PUBLIC, "10.1.2.3 is private"),
    ("https://169.254.169.254/latest/meta-data", ssrf.NOT_PUBLIC, "link-local"),
    ("https://100.64.0.1/", ssrf.NOT_PUBLIC, "CGNAT"), ("https://[fc00::1]/", ssrf.NOT_PUBLIC, "unique local"),
    ("https://224.0.0.1/", ssrf.NOT_PUBLIC, "multicast"), ("https://localhost:8443/", ssrf.NOT_PUBLIC, "loopback"),
    ("https://user:pw@93.184.216.34/", "credentials", None),
    ("https://walfeed-test.invalid/", ssrf.NOT_PUBLIC, "does not resolve"), ("ftp://93.184.216.34/", "https", None),
])
def test_a_url_reaching_inside_the_network_or_not_https_is_refused_saying_nothing_of_the_network(
        client: httpx.Client, signup: SignUp, db: Db, caplog: pytest.LogCaptureFixture, url: str, why: str,
        logged: str | None) -> None:
    with caplog.at_level(logging.INFO, logger="services.api.routes.webhooks"):
        reply = client.post("/v1/webhooks", json={"url": url, "events": ["mention"]}, headers=signup("alice").auth)
    assert reply.status_code == 422 and reply.json()["type"].endswith("/webhook-url-refused"), reply.text
    detail = reply.json()["detail"]
    assert why in detail
    if logged is not None:  # the address and its category are in the log's structured fields, not in the reply
        assert logged not in detail and not re.search(r"\d+\.\d+\.\d+\.\d+|::", detail), detail
        (record,) = [r for r in caplog.records if r.getMessage() == "webhook URL refused"]
        assert logged in record.detail  # type: ignore[attr-defined]
    assert db.execute("SELECT count(*) AS n FROM webhooks").fetchone() == {"n": 0}


@pytest.mark.parametrize("body", [{"url": PUBLIC}, {"url": PUBLIC, "events": []}, {"url": PUBLIC, "events": ["like"]},
                                  {"events": ["mention"]}, {"url": PUBLIC, "events": ["mention"], "secret": "x"}])
def test_a_malformed_registration_is_a_422_problem(client: httpx.Client, signup: SignUp, body: dict[str, Any]) -> None:
    reply = client.post("/v1/webhooks", json=body, headers=signup("alice").auth)
    assert reply.status_code == 422 and reply.json()["type"].endswith("/validation")


def test_a_user_has_at_most_max_webhooks(client: httpx.Client, signup: SignUp) -> None:
    alice = signup("alice")
    for _ in range(store.MAX_WEBHOOKS):
        register(client, alice)
    reply = client.post("/v1/webhooks", json={"url": PUBLIC, "events": ["follow"]}, headers=alice.auth)
    assert reply.status_code == 409 and reply.json()["type"].endswith("/webhook-limit")


def test_another_users_webhook_is_not_found_by_any_operation(client: httpx.Client, signup: SignUp, db: Db) -> None:
    alice, mallory = signup("alice"), signup("mallory")
    hook = register(client, alice)["id"]
    delivery = client.post(f"/v1/webhooks/{hook}/ping", headers=alice.auth).json()["delivery_id"]
    for method, path in [("GET", f"/v1/webhooks/{hook}"), ("DELETE", f"/v1/webhooks/{hook}"),
                         ("POST", f"/v1/webhooks/{hook}/rotate-secret"), ("POST", f"/v1/webhooks/{hook}/ping"),
                         ("POST", f"/v1/webhooks/{hook}/enable"), ("GET", f"/v1/webhooks/{hook}/deliveries"),
                         ("POST", f"/v1/webhooks/{hook}/deliveries/{delivery}/retry")]:
        reply = client.request(method, path, headers=mallory.auth)
        assert reply.status_code == 404, (method, path, reply.text)
    assert client.get("/v1/webhooks", headers=mallory.auth).json() == {"items": []}
    assert client.get(f"/v1/webhooks/{hook}", headers=alice.auth).status_code == 200
    assert delivery_events(db, delivery) == 1


def test_rotation_keeps_the_previous_secret_signing_for_the_overlap(client: httpx.Client, signup: SignUp,
                                                                    db: Db) -> None:
    alice = signup("alice")
    created = register(client, alice)
    before = datetime.now(UTC)
    rotated = client.post(f"/v1/webhooks/{created['id']}/rotate-secret", headers=alice.auth).json()
    assert rotated["id"] == created["id"] and rotated["secret"].startswith("whsec_")
    assert rotated["secret"] != created["secret"]
    until = datetime.fromisoformat(rotated["previous_secret_expires_at"])
    assert before + timedelta(hours=23) < until < before + timedelta(hours=25)
    row = db.execute("SELECT secret, previous_secret FROM webhooks WHERE id = %s", (created["id"],)).fetchone()
    assert row == {"secret": rotated["secret"], "previous_secret": created["secret"]}
    shown = client.get(f"/v1/webhooks/{created['id']}", headers=alice.auth).json()
    assert shown["previous_secret_expires_at"] == rotated["previous_secret_expires_at"]


def test_a_ping_is_a_delivery_without_notification_with_its_event_listed_with_the_deliveries(
        client: httpx.Client, signup: SignUp, db: Db) -> None:
    alice = signup("alice")
    hook = register(client, alice)["id"]
    pings = [client.post(f"/v1/webhooks/{hook}/ping", headers=alice.auth) for _ in range(3)]
    assert {r.status_code for r in pings} == {202}
    ids = [r.json()["delivery_id"] for r in pings]
    assert all(delivery_events(db, d) == 1 for d in ids)
    first = client.get(f"/v1/webhooks/{hook}/deliveries", params={"limit": 2}, headers=alice.auth).json()
    assert [d["id"] for d in first["items"]] == [ids[2], ids[1]]
    assert first["items"][0] == {"id": ids[2], "notification_id": None, "status": "PENDING", "attempts": 0,
                                 "last_status_code": None, "last_error": None, "next_attempt_at": None,
                                 "created_at": first["items"][0]["created_at"],
                                 "updated_at": first["items"][0]["updated_at"]}
    rest = client.get(f"/v1/webhooks/{hook}/deliveries", params={"cursor": first["next_cursor"]},
                      headers=alice.auth).json()
    assert [d["id"] for d in rest["items"]] == [ids[0]] and rest["next_cursor"] is None
    other = register(client, alice)["id"]
    reply = client.get(f"/v1/webhooks/{other}/deliveries", params={"cursor": first["next_cursor"]},
                       headers=alice.auth)
    assert reply.status_code == 400  # a cursor of another webhook's listing


def test_a_dead_delivery_is_retried_with_a_new_event_and_one_under_way_is_not(
        client: httpx.Client, signup: SignUp, db: Db) -> None:
    alice = signup("alice")
    hook = register(client, alice)["id"]
    delivery = client.post(f"/v1/webhooks/{hook}/ping", headers=alice.auth).json()["delivery_id"]
    retry = f"/v1/webhooks/{hook}/deliveries/{delivery}/retry"
    reply = client.post(retry, headers=alice.auth)
    assert reply.status_code == 409 and reply.json()["type"].endswith("/delivery-not-retriable")
    db.execute("UPDATE deliveries SET status = 'DEAD', attempts = 12, last_status_code = 500 WHERE id = %s",
               (delivery,))
    assert client.post(retry, headers=alice.auth).json() == {"delivery_id": delivery}
    row = db.execute("SELECT status, attempts, last_status_code FROM deliveries WHERE id = %s", (delivery,)).fetchone()
    assert row == {"status": "PENDING", "attempts": 0, "last_status_code": 500}
    assert delivery_events(db, delivery) == 2
    assert client.post(f"/v1/webhooks/{hook}/deliveries/{delivery + 1000}/retry",
                       headers=alice.auth).status_code == 404


def test_a_disabled_webhook_takes_no_ping_or_retry_until_enabled(client: httpx.Client, signup: SignUp,
                                                                 db: Db) -> None:
    alice = signup("alice")
    hook = register(client, alice)["id"]
    delivery = client.post(f"/v1/webhooks/{hook}/ping", headers=alice.auth).json()["delivery_id"]
    db.execute("UPDATE webhooks SET disabled_at = now(), disabled_reason = '410 Gone', failing_since = now() "
               "WHERE id = %s", (hook,))
    db.execute("UPDATE deliveries SET status = 'DEAD' WHERE id = %s", (delivery,))
    shown = client.get(f"/v1/webhooks/{hook}", headers=alice.auth).json()
    assert (shown["enabled"], shown["disabled_reason"]) == (False, "410 Gone")
    for path in (f"/v1/webhooks/{hook}/ping", f"/v1/webhooks/{hook}/deliveries/{delivery}/retry"):
        reply = client.post(path, headers=alice.auth)
        assert reply.status_code == 409 and reply.json()["type"].endswith("/webhook-disabled"), path
    enabled = client.post(f"/v1/webhooks/{hook}/enable", headers=alice.auth)
    assert enabled.status_code == 200 and (enabled.json()["enabled"], enabled.json()["disabled_reason"]) == (True, None)
    assert db.execute("SELECT failing_since FROM webhooks WHERE id = %s", (hook,)).fetchone() == {"failing_since": None}
    assert client.post(f"/v1/webhooks/{hook}/ping", headers=alice.auth).status_code == 202
    assert client.post(f"/v1/webhooks/{hook}/deliveries/{delivery}/retry", headers=alice.auth).status_code == 202


def test_deleting_a_webhook_deletes_its_deliveries(client: httpx.Client, signup: SignUp, db: Db) -> None:
    alice = signup("alice")
    hook = register(client, alice)["id"]
    client.post(f"/v1/webhooks/{hook}/ping", headers=alice.auth)
    assert client.delete(f"/v1/webhooks/{hook}", headers=alice.auth).status_code == 204
    assert client.get(f"/v1/webhooks/{hook}", headers=alice.auth).status_code == 404
    assert client.delete(f"/v1/webhooks/{hook}", headers=alice.auth).status_code == 404
    assert db.execute("SELECT count(*) AS n FROM deliveries").fetchone() == {"n": 0}


def test_registration_needs_a_token_before_any_url_is_resolved(client: httpx.Client) -> None:
    reply = client.post("/v1/webhooks", json={"url": "https://walfeed-test.invalid/", "events": ["mention"]})
    assert reply.status_code == 401  # not 422: nothing is looked up for an anonymous caller
