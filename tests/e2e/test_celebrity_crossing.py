"""An author crossing the celebrity threshold, both ways, while a reader pages (docs/adr/0096), with the three real
processes: posts decided as pushed, then pulled (the author has as many followers as WALFEED_CELEBRITY_THRESHOLD),
then pushed again (followers gone) all show in the reader's timeline, each once, paged towards older posts and
towards newer ones; and a follower who arrives after the author became a celebrity sees the pulled posts at once."""

from __future__ import annotations

from typing import Any

import httpx
import psycopg
import pytest

from testkit.processes import Processes, free_port
from testkit.waiting import eventually

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

THRESHOLD = 3


def _signup(api: httpx.Client, handle: str) -> dict[str, str]:
    resp = api.post("/v1/users", json={"handle": handle})
    assert resp.status_code == 201, resp.text
    body = resp.json()
    return {"id": str(body["id"]), "Authorization": f"Bearer {body['token']}"}


def _auth(account: dict[str, str]) -> dict[str, str]:
    return {"Authorization": account["Authorization"]}


def _all_pages(api: httpx.Client, reader: dict[str, str], *, newer_from: str | None = None) -> list[int]:
    """Every page towards older posts from the top, or towards newer ones from `newer_from`, newest first."""
    seen: list[int] = []
    cursor = newer_from
    while True:
        params: dict[str, Any] = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        resp = api.get("/v1/timeline", headers=_auth(reader), params=params)
        assert resp.status_code == 200, resp.text
        page = resp.json()
        ids = [p["id"] for p in page["items"]]
        if newer_from is None:
            seen += ids
            cursor = page["next_cursor"]
            if cursor is None:
                return seen
        else:
            if not ids:
                return seen
            seen = ids + seen
            cursor = page["prev_cursor"]


def test_posts_before_during_and_after_celebrity_status_all_show_once(
        processes: Processes, db: psycopg.Connection[Any]) -> None:
    db.autocommit = True  # each poll reads what has committed since
    port = free_port()
    env = {"WALFEED_CELEBRITY_THRESHOLD": str(THRESHOLD)}
    for name in ("api", "relay", "worker"):
        processes.start(name, name, *(("--port", str(port)) if name == "api" else ()), env=env)
    base = f"http://127.0.0.1:{port}"
    eventually(lambda: httpx.get(f"{base}/readyz").status_code == 200, timeout=30, what="api ready")

    def decided(post_id: int) -> bool | None:
        row = db.execute("SELECT fanned_out FROM posts WHERE id = %s", (post_id,)).fetchone()
        return None if row is None else row[0]

    def post(api: httpx.Client, author: dict[str, str], expect: bool) -> int:
        resp = api.post("/v1/posts", json={"body": "hi"}, headers=_auth(author))
        assert resp.status_code == 201, resp.text
        post_id: int = resp.json()["id"]
        eventually(lambda: decided(post_id) is not None, timeout=30, what=f"post {post_id} decided")
        assert decided(post_id) is expect, "pushed below the threshold, pulled at or above it"
        return post_id

    with httpx.Client(base_url=base, timeout=10) as api:
        author, reader = _signup(api, "author"), _signup(api, "reader")
        fans = [_signup(api, f"fan{i}") for i in range(THRESHOLD - 1)]
        assert api.put(f"/v1/following/{author['id']}", headers=_auth(reader)).status_code == 204
        pushed = [post(api, author, True) for _ in range(3)]
        eventually(lambda: set(pushed) <= set(_all_pages(api, reader)), timeout=30, what="pushed posts shown")
        top = _all_pages(api, reader)[0]
        newer_cursor = api.get("/v1/timeline", headers=_auth(reader), params={"limit": 1}).json()["prev_cursor"]

        for fan in fans:  # the author reaches the threshold
            assert api.put(f"/v1/following/{author['id']}", headers=_auth(fan)).status_code == 204
        eventually(lambda: db.execute("SELECT follower_count FROM users WHERE id = %s",
                                      (int(author["id"]),)).fetchone() == (THRESHOLD,), timeout=10,
                   what="follower count at the threshold")
        pulled = [post(api, author, False) for _ in range(3)]
        late = _signup(api, "late")  # follows a celebrity: the pulled posts are there on its first read
        assert api.put(f"/v1/following/{author['id']}", headers=_auth(late)).status_code == 204
        assert set(pulled) <= set(_all_pages(api, late))

        for fan in fans:  # and falls below it again
            assert api.delete(f"/v1/following/{author['id']}", headers=_auth(fan)).status_code == 204
        again = [post(api, author, True) for _ in range(3)]
        everything = sorted(pushed + pulled + again, reverse=True)
        eventually(lambda: _all_pages(api, reader) == everything, timeout=30,
                   what="every post once, older pages")
        assert _all_pages(api, reader, newer_from=newer_cursor) == [i for i in everything if i > top]
        assert db.execute("SELECT count(*) FROM pulled_authors WHERE author_id = %s",
                          (int(author["id"]),)).fetchone() == (1,)  # stays: its pulled posts stay pulled
