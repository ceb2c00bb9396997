"""Writes: outbox rows in the same transaction, idempotency keys, validation and error documents."""

from __future__ import annotations

from typing import Any

import httpx
import psycopg
import pytest

from tests.integration.api.conftest import MAX_BODY, SignUp

pytestmark = pytest.mark.integration

Db = psycopg.Connection[dict[str, Any]]


def outbox(db: Db) -> list[dict[str, Any]]:
    return db.execute("SELECT aggregatetype, aggregateid, type, payload FROM outbox ORDER BY created_at, id").fetchall()


def test_every_write_commits_its_event_and_no_ops_write_none(client: httpx.Client, signup: SignUp, db: Db) -> None:
    alice, bob = signup("alice"), signup("bob")
    assert outbox(db) == []  # sign-up is not an event
    assert client.put(f"/v1/following/{bob.id}", headers=alice.auth).status_code == 204
    assert client.put(f"/v1/following/{bob.id}", headers=alice.auth).status_code == 204  # no-op
    post = client.post("/v1/posts", json={"body": "hi"}, headers=bob.auth).json()
    assert client.delete(f"/v1/posts/{post['id']}", headers=bob.auth).status_code == 204
    assert client.delete(f"/v1/posts/{post['id']}", headers=bob.auth).status_code == 404  # deleted: no event
    assert client.delete(f"/v1/following/{bob.id}", headers=alice.auth).status_code == 204
    assert client.delete(f"/v1/following/{bob.id}", headers=alice.auth).status_code == 204  # no-op
    follow = {"follower_id": alice.id, "followee_id": bob.id}
    pid = post["id"]
    assert outbox(db) == [
        {"aggregatetype": "follow", "aggregateid": f"{alice.id}:{bob.id}", "type": "follow.created",
         "payload": follow},
        {"aggregatetype": "post", "aggregateid": str(pid), "type": "post.created",
         "payload": {"post_id": pid, "author_id": bob.id}},
        {"aggregatetype": "post", "aggregateid": str(pid), "type": "post.deleted",
         "payload": {"post_id": pid, "author_id": bob.id}},
        {"aggregatetype": "follow", "aggregateid": f"{alice.id}:{bob.id}", "type": "follow.deleted",
         "payload": follow},
    ]
    # Each event was written by the transaction that inserted the post (same transaction id).
    post2 = client.post("/v1/posts", json={"body": "again"}, headers=bob.auth).json()
    pair = db.execute("SELECT (SELECT xmin::text FROM posts WHERE id = %(id)s) AS post_tx, "
                      "(SELECT xmin::text FROM outbox WHERE aggregateid = %(aid)s AND type = 'post.created') "
                      "AS event_tx", {"id": post2["id"], "aid": str(post2["id"])}).fetchone()
    assert pair is not None and pair["post_tx"] == pair["event_tx"]


def test_failed_writes_leave_no_event(client: httpx.Client, signup: SignUp, db: Db) -> None:
    alice = signup("alice")
    assert client.put("/v1/following/999999", headers=alice.auth).status_code == 404
    assert client.put(f"/v1/following/{alice.id}", headers=alice.auth).status_code == 422
    assert client.post("/v1/posts", json={"body": ""}, headers=alice.auth).status_code == 422
    assert client.post("/v1/posts", json={"body": "x" * 501}, headers=alice.auth).status_code == 422
    assert client.post("/v1/posts", json={"body": "nul\u0000"}, headers=alice.auth).status_code == 422
    assert client.delete("/v1/posts/424242", headers=alice.auth).status_code == 404
    # A post whose transaction fails after the insert (the outbox insert is made to fail) leaves nothing.
    db.execute("ALTER TABLE outbox ADD CONSTRAINT test_reject CHECK (type <> 'post.created') NOT VALID")
    assert client.post("/v1/posts", json={"body": "doomed"}, headers=alice.auth).status_code == 500
    db.execute("ALTER TABLE outbox DROP CONSTRAINT test_reject")
    assert db.execute("SELECT count(*) AS n FROM posts").fetchone() == {"n": 0}
    assert outbox(db) == []


def test_idempotency_key(client: httpx.Client, signup: SignUp, db: Db) -> None:
    alice, bob = signup("alice"), signup("bob")
    first = client.post("/v1/posts", json={"body": "once"}, headers={**alice.auth, "Idempotency-Key": "k-1"})
    assert first.status_code == 201
    again = client.post("/v1/posts", json={"body": "once"}, headers={**alice.auth, "Idempotency-Key": "k-1"})
    assert again.status_code == 201 and again.json() == first.json()
    assert again.headers["idempotent-replayed"] == "true"
    changed = client.post("/v1/posts", json={"body": "twice"}, headers={**alice.auth, "Idempotency-Key": "k-1"})
    assert changed.status_code == 422 and changed.headers["content-type"] == "application/problem+json"
    # Keys are per author: bob's k-1 is a new post.
    other = client.post("/v1/posts", json={"body": "once"}, headers={**bob.auth, "Idempotency-Key": "k-1"})
    assert other.status_code == 201 and other.json()["id"] != first.json()["id"]
    assert db.execute("SELECT count(*) AS n FROM posts").fetchone() == {"n": 2}
    assert db.execute("SELECT count(*) AS n FROM outbox").fetchone() == {"n": 2}


def test_concurrent_retries_with_one_key_create_one_post(client: httpx.Client, signup: SignUp, db: Db) -> None:
    from concurrent.futures import ThreadPoolExecutor

    alice = signup("alice")
    headers = {**alice.auth, "Idempotency-Key": "race"}
    with ThreadPoolExecutor(8) as pool:
        replies = list(pool.map(lambda _: client.post("/v1/posts", json={"body": "r"}, headers=headers), range(16)))
    assert {r.status_code for r in replies} == {201}
    assert len({r.json()["id"] for r in replies}) == 1
    assert db.execute("SELECT count(*) AS n FROM outbox").fetchone() == {"n": 1}


@pytest.mark.parametrize(("method", "path", "kwargs", "status"), [
    ("GET", "/nowhere", {}, 404),
    ("PATCH", "/v1/posts", {}, 405),
    ("POST", "/v1/posts", {"content": b"{not json", "headers": {"content-type": "application/json"}}, 400),
    ("POST", "/v1/posts", {"content": b"x" * (MAX_BODY + 1), "headers": {"content-type": "application/json"}}, 413),
    ("POST", "/v1/posts", {"json": {"body": 5}}, 422),
    ("POST", "/v1/posts", {"json": ["body"]}, 422),
    ("GET", "/v1/posts/abc", {}, 422),
    ("GET", f"/v1/posts/{2**63}", {}, 422),
    ("GET", "/v1/posts/-1", {}, 422),
    ("GET", "/v1/posts/123", {}, 404),
    ("GET", "/v1/timeline?limit=0", {}, 422),
    ("GET", "/v1/timeline?limit=101", {}, 422),
    ("GET", "/v1/timeline?cursor=%%%", {}, 400),
    ("GET", "/v1/timeline?cursor=eyJ2IjoxLCJrIjoiaG9tZSIsImlkIjotMX0", {}, 400),  # id -1
    ("GET", "/v1/users/1/posts?cursor=eyJ2IjoxLCJrIjoiaG9tZSIsImlkIjo1fQ", {}, 400),  # a home cursor
    ("GET", "/v1/users/999/posts", {}, 404),
    ("GET", "/v1/users/999", {}, 404),
])
def test_errors_are_problem_documents(client: httpx.Client, signup: SignUp, method: str, path: str,
                                      kwargs: dict[str, Any], status: int) -> None:
    alice = signup("alice")
    headers = {**alice.auth, **kwargs.pop("headers", {})}
    reply = client.request(method, path, headers=headers, **kwargs)
    assert reply.status_code == status, reply.text
    assert reply.headers["content-type"] == "application/problem+json"
    doc = reply.json()
    assert doc["status"] == status and doc["type"].startswith("https://") and doc["title"] and doc["detail"]


@pytest.mark.parametrize("body", [b'{"body": "\xff"}', b'{"body": "x"', b"\xfe\xff"])
def test_a_body_that_is_not_json_is_malformed_json_whatever_breaks_it(client: httpx.Client, signup: SignUp,
                                                                      body: bytes) -> None:
    """Not UTF-8 is not JSON either (RFC 8259 8.1): the same problem type as a syntax error, which clients match."""
    alice = signup("alice")
    reply = client.post("/v1/posts", content=body, headers={**alice.auth, "content-type": "application/json"})
    assert reply.status_code == 400 and reply.json()["type"].endswith("/malformed-json"), reply.text


def test_chunked_body_over_the_limit_is_413(client: httpx.Client, signup: SignUp) -> None:
    alice = signup("alice")

    def chunks() -> Any:
        for _ in range(10):
            yield b"x" * 1000

    reply = client.post("/v1/posts", content=chunks(), headers={**alice.auth, "content-type": "application/json"})
    assert reply.status_code == 413


def test_users_and_counts(client: httpx.Client, signup: SignUp) -> None:
    alice, bob = signup("alice"), signup("bob")
    assert client.post("/v1/users", json={"handle": "alice"}).status_code == 409
    assert client.post("/v1/users", json={"handle": "Bad Handle"}).status_code == 422
    client.put(f"/v1/following/{bob.id}", headers=alice.auth)
    assert client.get(f"/v1/users/{bob.id}", headers=alice.auth).json() == {
        "id": bob.id, "handle": "bob", "follower_count": 1, "following_count": 0, "celebrity": False}
    assert client.get(f"/v1/users/{alice.id}", headers=alice.auth).json()["following_count"] == 1


def test_health_and_metrics(client: httpx.Client, signup: SignUp) -> None:
    alice = signup("alice")
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").json() == {"status": "ok"}
    client.get(f"/v1/users/{alice.id}", headers=alice.auth)
    text = client.get("/metrics").text
    assert 'walfeed_api_requests_total{method="GET",route="/v1/users/{user_id}",status="200"}' in text
    assert f"/v1/users/{alice.id}\"" not in text  # route templates, never raw paths
    assert "walfeed_api_request_seconds_bucket" in text


@pytest.mark.parametrize("body", [" ", "\u200b", "\u3000\u200d", "\u202egnp.exe", "ok \u2066isolated\u2069"])
def test_invisible_and_bidi_control_bodies_are_422_and_write_nothing(client: httpx.Client, signup: SignUp, db: Db,
                                                                      body: str) -> None:
    alice = signup("alice")
    reply = client.post("/v1/posts", json={"body": body}, headers=alice.auth)
    assert reply.status_code == 422 and reply.headers["content-type"] == "application/problem+json", reply.text
    assert reply.json()["errors"][0]["loc"] == ["body", "body"]
    assert db.execute("SELECT count(*) AS n FROM posts").fetchone() == {"n": 0}


def test_bodies_are_stored_and_returned_nfc(client: httpx.Client, signup: SignUp, db: Db) -> None:
    alice = signup("alice")
    post = client.post("/v1/posts", json={"body": "cafe\u0301"}, headers=alice.auth).json()
    assert post["body"] == "caf\u00e9"
    assert db.execute("SELECT body FROM posts WHERE id = %s", (post["id"],)).fetchone() == {"body": "caf\u00e9"}
