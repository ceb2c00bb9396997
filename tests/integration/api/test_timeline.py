"""Home timeline correctness against a reference computed from follows and posts, page by page, while the
simulated worker lags: stale rows, celebrity (pulled) posts, undecided posts, trimmed rows below the floor.

Above a reader's floor, others' posts that the worker has not decided yet are not in the timeline until it does
(the reader's own are, at once: read-your-writes; docs/adr/0096); below it every page comes from posts + follows.
Once the worker has caught up, every page equals the definition."""

from __future__ import annotations

import random
from typing import Any

import httpx
import psycopg
import pytest

from tests.integration.api.conftest import Account, SignUp

pytestmark = pytest.mark.integration

Db = psycopg.Connection[dict[str, Any]]


class LaggingWorker:
    """Does to `timelines` and `posts.fanned_out` what the fan-out worker would, but late and partly."""

    def __init__(self, db: Db, rng: random.Random, celebrities: set[int]) -> None:
        self.db, self.rng, self.celebrities = db, rng, celebrities

    def push(self, post_id: int, author: int, *, lagging: bool = True) -> None:
        if author in self.celebrities:
            self.db.execute("UPDATE posts SET fanned_out = false WHERE id = %s", (post_id,))
        elif not lagging or self.rng.random() < 0.85:  # else: not decided yet (fanned_out stays NULL)
            self.db.execute("UPDATE posts SET fanned_out = true WHERE id = %s", (post_id,))
            self.db.execute(
                "INSERT INTO timelines (user_id, post_id, author_id) "
                "SELECT follower_id, %(p)s, %(a)s FROM follows WHERE followee_id = %(a)s "
                "UNION SELECT %(a)s, %(p)s, %(a)s ON CONFLICT DO NOTHING", {"p": post_id, "a": author})

    def followed(self, follower: int, followee: int) -> None:
        if self.rng.random() < 0.6:  # backfill
            self.db.execute(
                "INSERT INTO timelines (user_id, post_id, author_id) SELECT %(u)s, id, author_id FROM posts "
                "WHERE author_id = %(a)s AND fanned_out AND deleted_at IS NULL ON CONFLICT DO NOTHING",
                {"u": follower, "a": followee})
        else:  # not backfilled: older rows may be missing, which the floor says
            self.db.execute("UPDATE users SET timeline_floor = GREATEST(timeline_floor, "
                            "(SELECT COALESCE(max(id), 0) + 1 FROM posts)) WHERE id = %s", (follower,))

    def unfollowed(self, follower: int, followee: int) -> None:
        if self.rng.random() < 0.5:  # else: stale rows stay for now
            self.db.execute("DELETE FROM timelines WHERE user_id = %s AND author_id = %s", (follower, followee))

    def deleted(self, post_id: int) -> None:
        if self.rng.random() < 0.5:
            self.db.execute("DELETE FROM timelines WHERE post_id = %s", (post_id,))

    def trim(self, user: int, keep: int) -> None:
        """Keep the newest `keep` rows, record the floor (as the cap does)."""
        row = self.db.execute("SELECT post_id FROM timelines WHERE user_id = %s ORDER BY post_id DESC "
                              "OFFSET %s LIMIT 1", (user, keep)).fetchone()
        if row is not None:
            floor = row["post_id"] + 1
            self.db.execute("DELETE FROM timelines WHERE user_id = %s AND post_id < %s", (user, floor))
            self.db.execute("UPDATE users SET timeline_floor = GREATEST(timeline_floor, %s) WHERE id = %s",
                            (floor, user))


    def catch_up(self) -> None:
        """Decide and push every post still undecided, as the worker does once it runs again."""
        for row in self.db.execute("SELECT id, author_id FROM posts WHERE fanned_out IS NULL ORDER BY id").fetchall():
            self.push(row["id"], row["author_id"], lagging=False)


def reference(db: Db, user: int) -> list[int]:
    """The timeline definition, less the posts of others not decided yet at or above the reader's floor."""
    rows = db.execute(
        "SELECT id FROM posts WHERE deleted_at IS NULL AND (author_id = %(u)s OR (author_id IN "
        "(SELECT followee_id FROM follows WHERE follower_id = %(u)s) AND (fanned_out IS NOT NULL "
        " OR id < (SELECT timeline_floor FROM users WHERE id = %(u)s)))) ORDER BY id DESC", {"u": user}).fetchall()
    return [r["id"] for r in rows]


def definition(db: Db, user: int) -> list[int]:
    rows = db.execute(
        "SELECT id FROM posts WHERE deleted_at IS NULL AND (author_id = %(u)s OR author_id IN "
        "(SELECT followee_id FROM follows WHERE follower_id = %(u)s)) ORDER BY id DESC", {"u": user}).fetchall()
    return [r["id"] for r in rows]


def read_all_pages(client: httpx.Client, me: Account, rng: random.Random, between_pages: Any) -> list[int]:
    seen: list[int] = []
    cursor: str | None = None
    while True:
        params: dict[str, Any] = {"limit": rng.randint(1, 7)}
        if cursor:
            params["cursor"] = cursor
        reply = client.get("/v1/timeline", params=params, headers=me.auth)
        assert reply.status_code == 200, reply.text
        page = reply.json()
        ids = [item["id"] for item in page["items"]]
        assert len(ids) <= params["limit"]
        assert ids == sorted(ids, reverse=True)
        seen += ids
        cursor = page["next_cursor"]
        if cursor is None:
            return seen
        assert len(ids) == params["limit"]  # only the last page may be short
        between_pages()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_timeline_matches_reference_page_by_page(client: httpx.Client, signup: SignUp, db: Db, seed: int) -> None:
    rng = random.Random(seed)
    users = [signup(f"u{i}") for i in range(8)]
    celebrities = {users[0].id, users[1].id}
    worker = LaggingWorker(db, rng, celebrities)
    posts: list[tuple[int, int]] = []
    deleted: set[int] = set()
    for _ in range(220):
        actor, other = rng.sample(users, 2)
        roll = rng.random()
        if roll < 0.45:
            post = client.post("/v1/posts", json={"body": f"p{len(posts)}"}, headers=actor.auth).json()
            posts.append((post["id"], actor.id))
            worker.push(post["id"], actor.id)
        elif roll < 0.70:
            assert client.put(f"/v1/following/{other.id}", headers=actor.auth).status_code == 204
            worker.followed(actor.id, other.id)
        elif roll < 0.85:
            assert client.delete(f"/v1/following/{other.id}", headers=actor.auth).status_code == 204
            worker.unfollowed(actor.id, other.id)
        elif posts:
            post_id, author = rng.choice(posts)
            mine = next(u for u in users if u.id == author)
            status = 404 if post_id in deleted else 204  # deleted already: 404, as GET answers
            assert client.delete(f"/v1/posts/{post_id}", headers=mine.auth).status_code == status
            deleted.add(post_id)
            worker.deleted(post_id)
    for user in users[2:5]:
        worker.trim(user.id, keep=rng.randint(0, 10))
    stale = db.execute("SELECT count(*) AS n FROM timelines t JOIN posts p ON p.id = t.post_id "
                       "WHERE p.deleted_at IS NOT NULL OR (t.user_id <> p.author_id AND NOT EXISTS (SELECT 1 "
                       "FROM follows f WHERE f.follower_id = t.user_id AND f.followee_id = p.author_id))"
                       ).fetchone()
    assert stale is not None and stale["n"] > 0, "the scenario should leave stale rows"
    assert db.execute("SELECT count(*) AS n FROM users WHERE timeline_floor > 0").fetchone()["n"] > 0  # type: ignore[index]

    for me in users:
        expected = reference(db, me.id)

        def new_posts_arrive() -> None:
            author = rng.choice(users)
            post = client.post("/v1/posts", json={"body": "late"}, headers=author.auth).json()
            worker.push(post["id"], author.id)

        got = read_all_pages(client, me, rng, new_posts_arrive)
        assert len(got) == len(set(got)), "a post appeared twice"
        assert got == expected, f"user {me.handle}: {got} != {expected}"
    # And a fresh first page shows the late posts too (newest first).
    me = users[5]
    first = client.get("/v1/timeline", params={"limit": 100}, headers=me.auth).json()
    assert [p["id"] for p in first["items"]] == reference(db, me.id)[:100]
    # Once the worker has decided every post, each timeline is the definition.
    assert db.execute("SELECT count(*) AS n FROM posts WHERE fanned_out IS NULL").fetchone()["n"] > 0  # type: ignore[index]
    worker.catch_up()
    for me in users:
        assert read_all_pages(client, me, rng, lambda: None) == definition(db, me.id), me.handle


def test_user_posts_pages(client: httpx.Client, signup: SignUp) -> None:
    alice, bob = signup("alice"), signup("bob")
    ids = [client.post("/v1/posts", json={"body": str(i)}, headers=alice.auth).json()["id"] for i in range(7)]
    client.delete(f"/v1/posts/{ids[3]}", headers=alice.auth)
    seen: list[int] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        page = client.get(f"/v1/users/{alice.id}/posts", params=params, headers=bob.auth).json()
        seen += [p["id"] for p in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == [i for i in reversed(ids) if i != ids[3]]
