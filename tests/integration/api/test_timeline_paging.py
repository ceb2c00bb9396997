"""Paging the home timeline both ways (docs/adr/0096): towards older posts with next_cursor and towards newer ones
with prev_cursor, posts arriving between pages, celebrity (pulled) posts merged in both directions, a page that
straddles the reader's floor: every post once, in order, and nothing else."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import httpx
import psycopg
import pytest
from psycopg.rows import dict_row

from services.api import cursor as cursors
from services.api import store
from services.api.paging import Range
from tests.integration.api.conftest import Account, SignUp
from tests.integration.api.test_timeline import Db, LaggingWorker, definition

pytestmark = pytest.mark.integration


def _page(client: httpx.Client, me: Account, **params: Any) -> dict[str, Any]:
    reply = client.get("/v1/timeline", params=params, headers=me.auth)
    assert reply.status_code == 200, reply.text
    page: dict[str, Any] = reply.json()
    ids = [p["id"] for p in page["items"]]
    assert ids == sorted(ids, reverse=True) and len(ids) <= params["limit"]
    return page


class World:
    def __init__(self, client: httpx.Client, signup: SignUp, db: Db, seed: int) -> None:
        self.client, self.db, self.rng = client, db, random.Random(seed)
        self.reader = signup("reader")
        self.authors = [signup(f"author{i}") for i in range(4)]
        self.stranger = signup("stranger")
        self.worker = LaggingWorker(db, self.rng, celebrities={self.authors[0].id})
        for author in self.authors:
            assert client.put(f"/v1/following/{author.id}", headers=self.reader.auth).status_code == 204
            self.worker.followed(self.reader.id, author.id)

    def post(self, author: Account | None = None) -> int:
        author = author or self.rng.choice([*self.authors, self.reader, self.stranger])
        reply = self.client.post("/v1/posts", json={"body": "x"}, headers=author.auth)
        assert reply.status_code == 201, reply.text
        post_id: int = reply.json()["id"]
        self.worker.push(post_id, author.id, lagging=False)
        return post_id


@pytest.mark.parametrize("seed", [1, 2])
def test_paging_older_then_newer_with_posts_arriving_shows_each_post_once(
        client: httpx.Client, signup: SignUp, db: Db, seed: int) -> None:
    world = World(client, signup, db, seed)
    for _ in range(40):
        world.post()
    before = definition(db, world.reader.id)
    first = _page(client, world.reader, limit=5)
    older, page = [p["id"] for p in first["items"]], first
    while page["next_cursor"]:
        world.post()  # arrives while the reader scrolls back: on no older page
        page = _page(client, world.reader, limit=world.rng.randint(1, 6), cursor=page["next_cursor"])
        older += [p["id"] for p in page["items"]]
    assert older == before, "scrolling back shows the timeline as it was, each post once"

    newer: list[int] = []
    cursor = first["prev_cursor"]
    for _ in range(200):
        if world.rng.random() < 0.5:
            world.post()
        page = _page(client, world.reader, limit=world.rng.randint(1, 4), cursor=cursor)
        ids = [p["id"] for p in page["items"]]
        newer = ids + newer  # each page is newer than the one before
        assert page["prev_cursor"] is not None  # an empty page tells where to ask again
        cursor = page["prev_cursor"]
        if not ids and world.rng.random() < 0.3:
            break
    assert len(newer) == len(set(newer))
    top = first["items"][0]["id"]
    assert newer == [i for i in definition(db, world.reader.id) if i > top], "each newer post once, in order"
    pulled = {r["id"] for r in db.execute("SELECT id FROM posts WHERE fanned_out = false").fetchall()}
    assert pulled & set(newer) and pulled & set(older), "celebrity posts merged in both directions"


def test_a_newer_page_straddling_the_floor_reads_below_it_first(client: httpx.Client, signup: SignUp,
                                                                 db: Db) -> None:
    world = World(client, signup, db, 3)
    ids = [world.post(world.authors[1 + i % 3]) for i in range(30)]
    world.worker.trim(world.reader.id, keep=10)  # rows below the floor go: read from posts + follows there
    floor = db.execute("SELECT timeline_floor AS f FROM users WHERE id = %s", (world.reader.id,)).fetchone()
    assert floor is not None and ids[0] < floor["f"] <= ids[-1]
    page = _page(client, world.reader, limit=100)
    assert [p["id"] for p in page["items"]] == sorted(ids, reverse=True)
    asc = _walk_newer(client, world.reader, cursors.encode("home", ids[0], newer=True), limit=7)
    assert asc == sorted(ids)[1:], "from the oldest post towards newer ones, across the floor, each once"


def _walk_newer(client: httpx.Client, me: Account, after_cursor: str, limit: int) -> list[int]:
    seen: list[int] = []
    cursor = after_cursor
    while True:
        page = _page(client, me, limit=limit, cursor=cursor)
        ids = [p["id"] for p in page["items"]]
        if not ids:
            return seen
        seen += sorted(ids)
        cursor = page["prev_cursor"]


async def _store_pages(database_url: str, user: int, after: int) -> tuple[list[int], list[int]]:
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True, row_factory=dict_row) as conn:
        since = await store.home_timeline(conn, user, Range(after=after, order="newest", fetch=5))
        minimum = await store.home_timeline(conn, user, Range(after=after, order="oldest", fetch=5))
    return [r["id"] for r in since], [r["id"] for r in minimum]


def test_since_and_min_ranges_as_mastodon_clients_ask_them(client: httpx.Client, signup: SignUp, db: Db,
                                                            database_url: str) -> None:
    """since_id: the newest page above an id (a gap may stay below it); min_id: the page just above it."""
    world = World(client, signup, db, 4)
    ids = [world.post(world.authors[i % 4]) for i in range(20)]
    since, minimum = asyncio.run(_store_pages(database_url, world.reader.id, ids[4]))
    assert since == sorted(ids, reverse=True)[:5]
    assert minimum == ids[5:10]


def test_a_newer_cursor_at_the_last_id_is_an_empty_page_not_an_overflow(client: httpx.Client,
                                                                        signup: SignUp) -> None:
    """No page lies above the largest id: a forged cursor there is an empty page, not `bigint out of range` (a 500),
    through /v1 and Mastodon's min_id alike."""
    me = signup("reader")
    assert client.post("/v1/posts", json={"body": "x"}, headers=me.auth).status_code == 201
    page = _page(client, me, limit=5, cursor=cursors.encode("home", cursors.MAX_ID, newer=True))
    assert page["items"] == [] and page["next_cursor"] is None
