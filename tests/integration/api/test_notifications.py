"""In-app notifications and the caller's mail settings: GET /v1/notifications, POST /v1/notifications/read,
GET and PATCH /v1/users/me. Notifications are written here as the notifier writes them."""

from __future__ import annotations

import time
import uuid
from typing import Any

import httpx
import psycopg
import pytest

from services.core import mailtokens
from tests.integration.api.conftest import Account, SignUp

pytestmark = pytest.mark.integration

Db = psycopg.Connection[dict[str, Any]]


def notify(db: Db, recipient: Account, actor: Account, kind: str = "follow", *, withdrawn: bool = False) -> int:
    row = db.execute(
        "INSERT INTO notifications (recipient_id, kind, actor_id, post_id, event_id, withdrawn_at) "
        "VALUES (%s, %s, %s, NULL, %s, CASE WHEN %s THEN now() END) RETURNING id",
        (recipient.id, kind, actor.id, uuid.uuid4(), withdrawn)).fetchone()
    assert row is not None
    return int(row["id"])


def listing(client: httpx.Client, who: Account, **params: Any) -> dict[str, Any]:
    reply = client.get("/v1/notifications", headers=who.auth, params=params)
    assert reply.status_code == 200, reply.text
    return reply.json()  # type: ignore[no-any-return]


def test_notifications_are_the_callers_own_newest_first_in_pages_without_withdrawn_ones(
        client: httpx.Client, signup: SignUp, db: Db) -> None:
    alice, bob, carol = signup("alice"), signup("bob"), signup("carol")
    ids = [notify(db, alice, bob), notify(db, alice, carol, "mention"), notify(db, alice, bob, "mention")]
    notify(db, alice, carol, "mention", withdrawn=True)
    theirs = notify(db, bob, alice)

    first = listing(client, alice, limit=2)
    assert [n["id"] for n in first["items"]] == [ids[2], ids[1]] and first["unread_count"] == 3
    assert first["items"][0] == {"id": ids[2], "kind": "mention", "actor_id": bob.id, "post_id": None,
                                 "created_at": first["items"][0]["created_at"], "read": False}
    second = listing(client, alice, limit=2, cursor=first["next_cursor"])
    assert [n["id"] for n in second["items"]] == [ids[0]] and second["next_cursor"] is None
    assert [n["id"] for n in listing(client, bob)["items"]] == [theirs]
    assert listing(client, carol) == {"items": [], "next_cursor": None, "unread_count": 0}


def test_reading_moves_the_marker_up_only_and_never_past_the_newest_notification(
        client: httpx.Client, signup: SignUp, db: Db) -> None:
    alice, bob = signup("alice"), signup("bob")
    assert client.post("/v1/notifications/read", json={"up_to": 5}, headers=alice.auth).json() == {
        "unread_count": 0}  # nothing to read: no marker set
    ids = [notify(db, alice, bob) for _ in range(3)]
    assert client.post("/v1/notifications/read", json={"up_to": ids[1]}, headers=alice.auth).json() == {
        "unread_count": 1}
    assert [n["read"] for n in listing(client, alice)["items"]] == [False, True, True]
    assert client.post("/v1/notifications/read", json={"up_to": ids[0]}, headers=alice.auth).json() == {
        "unread_count": 1}  # never back
    assert client.post("/v1/notifications/read", json={"up_to": 10**30}, headers=alice.auth).json() == {
        "unread_count": 0}  # past every id: everything so far
    later = notify(db, alice, bob)  # after a marker beyond every id: still unread
    page = listing(client, alice)
    assert page["unread_count"] == 1 and page["items"][0] == {**page["items"][0], "id": later, "read": False}


@pytest.mark.parametrize("body", [{}, {"up_to": 0}, {"up_to": "1"}, {"up_to": 1.5}, {"up_to": 1, "x": 1}])
def test_a_bad_read_marker_is_a_422_problem(client: httpx.Client, signup: SignUp, body: dict[str, Any]) -> None:
    reply = client.post("/v1/notifications/read", json=body, headers=signup("alice").auth)
    assert reply.status_code == 422 and reply.headers["content-type"] == "application/problem+json"


def test_notifications_need_a_token_and_a_cursor_of_their_own(client: httpx.Client, signup: SignUp) -> None:
    alice = signup("alice")
    assert client.get("/v1/notifications").status_code == 401
    assert client.post("/v1/notifications/read", json={"up_to": 1}).status_code == 401
    client.post("/v1/posts", json={"body": "a"}, headers=alice.auth)
    client.post("/v1/posts", json={"body": "b"}, headers=alice.auth)
    posts_cursor = client.get(f"/v1/users/{alice.id}/posts", params={"limit": 1}, headers=alice.auth).json()
    reply = client.get("/v1/notifications", params={"cursor": posts_cursor["next_cursor"]}, headers=alice.auth)
    assert reply.status_code == 400 and reply.json()["type"].endswith("/invalid-cursor")


def test_the_caller_sets_and_clears_the_mail_address_and_kinds(client: httpx.Client, signup: SignUp) -> None:
    alice = signup("alice")
    me = {"id": alice.id, "handle": "alice", "email": None, "email_kinds": [], "email_verified": False}
    assert client.get("/v1/users/me", headers=alice.auth).json() == me
    reply = client.patch("/v1/users/me", json={"email": "alice@example.com", "email_kinds": ["mention", "mention"]},
                         headers=alice.auth)
    assert reply.status_code == 200 and reply.json() == {**me, "email": "alice@example.com",
                                                         "email_kinds": ["mention"]}
    reply = client.patch("/v1/users/me", json={"email_kinds": ["follow", "mention"]}, headers=alice.auth)
    assert reply.json() == {**me, "email": "alice@example.com", "email_kinds": ["follow", "mention"]}
    reply = client.patch("/v1/users/me", json={"email": None}, headers=alice.auth)
    assert reply.json() == {**me, "email_kinds": ["follow", "mention"]}
    assert client.get("/v1/users/me", headers=alice.auth).json() == reply.json()


@pytest.mark.parametrize("body", [{"email": "no-at-sign"}, {"email": "a b@example.com"}, {"email": "a@nodot"},
                                  {"email": "x" * 250 + "@example.com"}, {"email": "a@b.c\n"},
                                  {"email_kinds": ["like"]}, {"email_kinds": "mention"}, {"other": 1}])
def test_bad_mail_settings_are_a_422_problem_and_change_nothing(client: httpx.Client, signup: SignUp,
                                                                body: dict[str, Any]) -> None:
    alice = signup("alice")
    reply = client.patch("/v1/users/me", json=body, headers=alice.auth)
    assert reply.status_code == 422 and reply.json()["type"].endswith("/validation"), reply.text
    assert client.get("/v1/users/me", headers=alice.auth).json()["email"] is None
    assert client.patch("/v1/users/me", json={}).status_code == 401


def _key(db: Db) -> bytes:
    row = db.execute("SELECT value FROM server_secrets WHERE name = 'email_tokens'").fetchone()
    assert row is not None
    return bytes(row["value"])


def _verification_mails(db: Db, user: int) -> list[str]:
    """The statuses of the user's verification mails (email deliveries without a notification), each with its
    delivery.email outbox event."""
    rows = db.execute("SELECT d.status, o.type FROM deliveries d JOIN outbox o ON o.aggregateid = d.id::text "
                      "AND o.aggregatetype = 'delivery' WHERE d.recipient_id = %s AND d.channel = 'email' "
                      "AND d.notification_id IS NULL ORDER BY d.id", (user,)).fetchall()
    assert all(r["type"] == "delivery.email" for r in rows)
    return [r["status"] for r in rows]


def test_a_new_address_is_unverified_until_the_mailed_code_comes_back(
        client: httpx.Client, signup: SignUp, db: Db) -> None:
    """Setting an address queues one verification mail (the same address again: none); only the code signed for
    the caller's current address verifies it."""
    alice, mallory = signup("alice"), signup("mallory")
    reply = client.patch("/v1/users/me", json={"email": "alice@example.com", "email_kinds": ["mention"]},
                         headers=alice.auth)
    assert reply.json()["email_verified"] is False and _verification_mails(db, alice.id) == ["PENDING"]
    client.patch("/v1/users/me", json={"email": "alice@example.com"}, headers=alice.auth)
    assert _verification_mails(db, alice.id) == ["PENDING"]

    key, now = _key(db), time.time()
    for wrong in ["", "nonsense", mailtokens.verification_code(key, alice.id, "other@example.com", now),
                  mailtokens.verification_code(key, mallory.id, "alice@example.com", now),
                  mailtokens.verification_code(b"k" * 32, alice.id, "alice@example.com", now),
                  mailtokens.verification_code(key, alice.id, "alice@example.com", now - 3 * 24 * 3600)]:
        refused = client.post("/v1/users/me/email/verify", json={"code": wrong}, headers=alice.auth)
        assert refused.status_code in (400, 422), refused.text
        if refused.status_code == 400:
            assert refused.json()["type"].endswith("/invalid-verification-code"), refused.text
    assert client.get("/v1/users/me", headers=alice.auth).json()["email_verified"] is False

    code = mailtokens.verification_code(key, alice.id, "alice@example.com", now)
    assert client.post("/v1/users/me/email/verify", json={"code": code}).status_code == 401
    verified = client.post("/v1/users/me/email/verify", json={"code": code}, headers=alice.auth)
    assert verified.status_code == 200 and verified.json()["email_verified"] is True, verified.text
    assert client.patch("/v1/users/me", json={"email_kinds": ["follow"]}, headers=alice.auth).json()[
        "email_verified"] is True  # the kinds changed, the address did not
    moved = client.patch("/v1/users/me", json={"email": "alice@new.example.com"}, headers=alice.auth).json()
    assert moved["email_verified"] is False and _verification_mails(db, alice.id) == ["PENDING", "PENDING"]
    again = client.post("/v1/users/me/email/verify", json={"code": code}, headers=alice.auth)
    assert again.status_code == 400  # the old address's code verifies nothing now


def test_the_same_unverified_address_set_again_gets_a_new_code_once_none_is_on_its_way(
        client: httpx.Client, signup: SignUp, db: Db) -> None:
    """The code expired, or its mail failed: setting the address again (what the 400 of a wrong code tells) mails a
    new one; while one is on its way, it does not (a stranger's box is not mailed twice for one setting)."""
    alice = signup("alice")
    client.patch("/v1/users/me", json={"email": "alice@example.com"}, headers=alice.auth)
    client.patch("/v1/users/me", json={"email": "alice@example.com"}, headers=alice.auth)
    assert _verification_mails(db, alice.id) == ["PENDING"]
    db.execute("UPDATE deliveries SET status = 'DEAD' WHERE recipient_id = %s AND notification_id IS NULL",
               (alice.id,))
    reply = client.patch("/v1/users/me", json={"email": "alice@example.com"}, headers=alice.auth)
    assert reply.status_code == 200 and reply.json()["email_verified"] is False
    assert _verification_mails(db, alice.id) == ["DEAD", "PENDING"]
    code = mailtokens.verification_code(_key(db), alice.id, "alice@example.com", time.time())
    assert client.post("/v1/users/me/email/verify", json={"code": code}, headers=alice.auth).status_code == 200
    client.patch("/v1/users/me", json={"email": "alice@example.com"}, headers=alice.auth)
    assert _verification_mails(db, alice.id) == ["DEAD", "PENDING"]  # verified: nothing more


def test_one_click_unsubscribe_stops_that_kind_for_that_address_without_a_bearer(
        client: httpx.Client, signup: SignUp, db: Db) -> None:
    alice = signup("alice")
    client.patch("/v1/users/me", json={"email": "alice@example.com", "email_kinds": ["follow", "mention"]},
                 headers=alice.auth)
    key = _key(db)
    token = mailtokens.unsubscribe_token(key, alice.id, "mention", "alice@example.com")
    for wrong in ["x", token[:-1] + ("A" if token[-1] != "A" else "B"),
                  mailtokens.unsubscribe_token(key, alice.id, "mention", "old@example.com")]:
        refused = client.post("/v1/unsubscribe", params={"token": wrong}, content="List-Unsubscribe=One-Click",
                              headers={"Content-Type": "application/x-www-form-urlencoded"})
        assert refused.status_code == 400 and refused.json()["type"].endswith("/invalid-unsubscribe-token")
    done = client.post("/v1/unsubscribe", params={"token": token}, content="List-Unsubscribe=One-Click",
                       headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert done.status_code == 200 and done.json() == {"unsubscribed": "mention"}, done.text
    assert client.get("/v1/users/me", headers=alice.auth).json()["email_kinds"] == ["follow"]
    assert client.post("/v1/unsubscribe", params={"token": token}).status_code == 200  # again: still none
