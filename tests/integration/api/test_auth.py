"""Authorization matrix: every endpoint without a token, with a bad token, and with another user's token."""

from __future__ import annotations

import httpx
import pytest

from tests.integration.api.conftest import Account, SignUp

pytestmark = pytest.mark.integration

# (method, path template, json body); {other} is a user id, {post} a post of `owner`.
ENDPOINTS = [
    ("GET", "/v1/users/{owner_id}", None),
    ("PUT", "/v1/following/{owner_id}", None),
    ("DELETE", "/v1/following/{owner_id}", None),
    ("POST", "/v1/posts", {"body": "hello"}),
    ("GET", "/v1/posts/{post}", None),
    ("DELETE", "/v1/posts/{post}", None),
    ("GET", "/v1/timeline", None),
    ("GET", "/v1/users/{owner_id}/posts", None),
]
BAD_AUTH = [
    {},
    {"Authorization": "Bearer not-a-token"},
    {"Authorization": "Basic dXNlcjpwYXNz"},
    {"Authorization": "Bearer"},
    {"Authorization": "Bearer " + "x" * 5000},
]


@pytest.fixture
def owner_and_post(client: httpx.Client, signup: SignUp) -> tuple[Account, int]:
    owner = signup("owner")
    reply = client.post("/v1/posts", json={"body": "owned"}, headers=owner.auth)
    assert reply.status_code == 201
    return owner, int(reply.json()["id"])


@pytest.mark.parametrize(("method", "path", "body"), ENDPOINTS)
def test_no_or_bad_token_is_401_with_challenge(client: httpx.Client, owner_and_post: tuple[Account, int],
                                               method: str, path: str, body: object) -> None:
    owner, post = owner_and_post
    url = path.format(owner_id=owner.id, post=post)
    for headers in BAD_AUTH:
        reply = client.request(method, url, json=body, headers=headers)
        assert reply.status_code == 401, (headers, reply.text)
        assert reply.headers["content-type"] == "application/problem+json"
        assert reply.headers["www-authenticate"].startswith("Bearer")
        assert reply.json()["status"] == 401


def test_another_users_token_cannot_act_as_the_owner(client: httpx.Client, signup: SignUp,
                                                     owner_and_post: tuple[Account, int], db: object) -> None:
    owner, post = owner_and_post
    other = signup("other")
    # Reads are allowed to any signed-in user.
    assert client.get(f"/v1/users/{owner.id}", headers=other.auth).status_code == 200
    assert client.get(f"/v1/posts/{post}", headers=other.auth).status_code == 200
    assert client.get(f"/v1/users/{owner.id}/posts", headers=other.auth).status_code == 200
    # Deleting someone else's post: 404 as for a post that does not exist, and the post stays.
    reply = client.delete(f"/v1/posts/{post}", headers=other.auth)
    assert reply.status_code == 404 and reply.headers["content-type"] == "application/problem+json"
    assert client.get(f"/v1/posts/{post}", headers=owner.auth).status_code == 200
    # author_id is never taken from the client (extra fields are rejected outright).
    reply = client.post("/v1/posts", json={"body": "x", "author_id": owner.id}, headers=other.auth)
    assert reply.status_code == 422
    mine = client.post("/v1/posts", json={"body": "x"}, headers=other.auth).json()
    assert mine["author_id"] == other.id
    # Following acts for the caller only: other follows owner, owner's following count is untouched.
    assert client.put(f"/v1/following/{owner.id}", headers=other.auth).status_code == 204
    assert client.get(f"/v1/users/{owner.id}", headers=other.auth).json()["follower_count"] == 1
    assert client.get(f"/v1/users/{owner.id}", headers=other.auth).json()["following_count"] == 0
    # The timeline is the caller's own: owner's timeline does not get other's posts.
    owner_feed = client.get("/v1/timeline", headers=owner.auth).json()["items"]
    assert {p["author_id"] for p in owner_feed} == {owner.id}


def test_public_endpoints_need_no_token(client: httpx.Client) -> None:
    for path in ("/healthz", "/readyz", "/metrics", "/openapi.json"):
        assert client.get(path).status_code == 200, path
    assert client.post("/v1/users", json={"handle": "newbie"}).status_code == 201


def test_deleting_a_deleted_or_someone_elses_post_is_404_like_get(client: httpx.Client, signup: SignUp,
                                                                    owner_and_post: tuple[Account, int]) -> None:
    owner, post = owner_and_post
    other = signup("other")
    assert client.delete(f"/v1/posts/{post}", headers=owner.auth).status_code == 204
    for caller in (other, owner):  # someone else's deleted post, and one's own deleted post
        assert client.get(f"/v1/posts/{post}", headers=caller.auth).status_code == 404
        reply = client.delete(f"/v1/posts/{post}", headers=caller.auth)
        assert reply.status_code == 404 and reply.json()["status"] == 404, reply.text
