"""In-app notifications and the caller's mail settings: GET /v1/notifications, POST /v1/notifications/read,
GET and PATCH /v1/users/me. Notifications are written here as the notifier writes them."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import psycopg
import pytest

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
    me = {"id": alice.id, "handle": "alice", "email": None, "email_kinds": []}
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
