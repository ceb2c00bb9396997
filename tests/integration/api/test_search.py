"""GET /v1/search without an embedder (the api under test has none): text search, the degraded answer of semantic
and hybrid, filters, paging by cursor, bad input."""

from __future__ import annotations

import httpx
import pytest

from services.api.app import create_app
from services.api.ratelimit import Quota
from services.api.search_config import SearchSettings
from services.core.settings import Settings
from tests.integration.api.conftest import NO_EMBEDDER, TEST_API, SignUp, serve

pytestmark = pytest.mark.integration


def _post(client: httpx.Client, auth: dict[str, str], body: str) -> int:
    reply = client.post("/v1/posts", json={"body": body}, headers=auth)
    assert reply.status_code == 201, reply.text
    return int(reply.json()["id"])


def test_text_search_finds_words_hashtags_and_names_with_scores(client: httpx.Client, signup: SignUp) -> None:
    alice = signup("alice")
    match = _post(client, alice.auth, "Release notes for #walfeed by Okonkwo")
    _post(client, alice.auth, "nothing to see")
    for q in ("#walfeed", "okonkwo", '"release notes"', "walfeed -nothing"):
        page = client.get("/v1/search", params={"q": q, "mode": "text"}, headers=alice.auth).json()
        assert [item["id"] for item in page["items"]] == [match], q
        assert page["items"][0]["score"] > 0 and page["mode"] == "text" and page["degraded"] is None


def test_semantic_and_hybrid_answer_from_text_and_say_why(client: httpx.Client, signup: SignUp) -> None:
    alice = signup("alice")
    match = _post(client, alice.auth, "the cat sat on the mat")
    for mode in ("semantic", "hybrid"):
        page = client.get("/v1/search", params={"q": "cat", "mode": mode}, headers=alice.auth).json()
        assert (page["mode"], page["degraded"]) == ("text", "embedder-off")
        assert [item["id"] for item in page["items"]] == [match]


def test_filters_by_author_and_time(client: httpx.Client, signup: SignUp) -> None:
    alice, bob = signup("alice"), signup("bob")
    mine = _post(client, alice.auth, "weather report sunny")
    theirs = _post(client, bob.auth, "weather report rainy")
    created = client.get(f"/v1/posts/{theirs}", headers=bob.auth).json()["created_at"]

    def found(**params: str | int) -> list[int]:
        reply = client.get("/v1/search", params={"q": "weather", "mode": "text", **params}, headers=alice.auth)
        assert reply.status_code == 200, reply.text
        return [item["id"] for item in reply.json()["items"]]

    assert sorted(found()) == sorted([mine, theirs])
    assert found(author_id=bob.id) == [theirs]
    assert found(since=created) == [theirs]
    assert found(until=created) == [mine]
    assert found(since="2999-01-01T00:00:00") == []


def test_pages_follow_the_cursor_to_the_end_without_repeats(client: httpx.Client, signup: SignUp) -> None:
    alice = signup("alice")
    posted = {_post(client, alice.auth, f"pager item {i}") for i in range(7)}
    seen: list[int] = []
    params: dict[str, str | int] = {"q": "pager", "mode": "text", "limit": 3}
    while True:
        page = client.get("/v1/search", params=params, headers=alice.auth).json()
        seen += [item["id"] for item in page["items"]]
        if page["next_cursor"] is None:
            break
        params["cursor"] = page["next_cursor"]
    assert sorted(seen) == sorted(posted) and len(seen) == len(posted)


def test_a_cursor_of_another_query_and_bad_queries_are_problems(client: httpx.Client, signup: SignUp) -> None:
    alice = signup("alice")
    for i in range(3):
        _post(client, alice.auth, f"alpha {i}")
    cursor = client.get("/v1/search", params={"q": "alpha", "mode": "text", "limit": 1},
                        headers=alice.auth).json()["next_cursor"]
    reply = client.get("/v1/search", params={"q": "beta", "mode": "text", "cursor": cursor}, headers=alice.auth)
    assert reply.status_code == 400 and reply.json()["type"].endswith("invalid-cursor")
    bad: list[dict[str, str | int]] = [
        {"q": "   "}, {"q": "a\x00b"}, {"q": "x", "mode": "fuzzy"}, {"q": "x", "limit": 0}, {"q": "x" * 501},
        {"q": "x", "author_id": 0}, {"q": "x", "since": "yesterday"}, {}]
    for params in bad:
        reply = client.get("/v1/search", params=params, headers=alice.auth)
        assert reply.status_code == 422, (params, reply.text)
    assert client.get("/v1/search", params={"q": "alpha"}).status_code == 401


def test_punctuation_only_finds_nothing_instead_of_failing(client: httpx.Client, signup: SignUp) -> None:
    alice = signup("alice")
    _post(client, alice.auth, "something")
    for q in ("!!!", "-", '"', "& | !"):
        reply = client.get("/v1/search", params={"q": q, "mode": "text"}, headers=alice.auth)
        assert reply.status_code == 200 and reply.json()["items"] == [], (q, reply.text)


def test_searches_are_counted_against_their_own_rate_limit(settings: Settings) -> None:
    limited = SearchSettings(limit=Quota("search", 2, 60))
    with serve(create_app(settings, TEST_API, search_settings=limited, embedder_settings=NO_EMBEDDER)) as url, \
            httpx.Client(base_url=url, timeout=30) as client:
        token = client.post("/v1/users", json={"handle": "searcher"}).json()["token"]
        auth = {"Authorization": f"Bearer {token}"}
        replies = [client.get("/v1/search", params={"q": "anything", "mode": "text"}, headers=auth) for _ in range(3)]
        assert [r.status_code for r in replies] == [200, 200, 429]
        assert replies[0].headers["RateLimit-Policy"] == '"search";q=2;w=60'
        assert replies[2].json()["type"].endswith("rate-limited") and "Retry-After" in replies[2].headers
