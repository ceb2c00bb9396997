"""Follower and following counts stay exact when many clients follow and unfollow at once."""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import psycopg
import pytest
from psycopg.rows import dict_row

from testkit.waiting import eventually
from tests.integration.api.conftest import SignUp

pytestmark = pytest.mark.integration


def test_counts_exact_under_concurrent_follow_and_unfollow(client: httpx.Client, signup: SignUp,
                                                           db: psycopg.Connection[dict[str, Any]]) -> None:
    users = [signup(f"c{i}") for i in range(6)]

    def churn(seed: int) -> list[int]:
        rng = random.Random(seed)
        statuses = []
        for _ in range(40):
            me, other = rng.sample(users, 2)  # A->B and B->A race too: no deadlock allowed
            verb = "PUT" if rng.random() < 0.55 else "DELETE"
            statuses.append(client.request(verb, f"/v1/following/{other.id}", headers=me.auth).status_code)
        return statuses

    with ThreadPoolExecutor(8) as pool:
        results = [s for batch in pool.map(churn, range(8)) for s in batch]
    assert set(results) == {204}

    rows = db.execute(
        "SELECT u.id, u.follower_count, u.following_count, "
        "(SELECT count(*) FROM follows f WHERE f.followee_id = u.id) AS followers, "
        "(SELECT count(*) FROM follows f WHERE f.follower_id = u.id) AS following FROM users u").fetchall()
    for row in rows:
        assert (row["follower_count"], row["following_count"]) == (row["followers"], row["following"]), row
    events = db.execute("SELECT type, count(*) AS n FROM outbox GROUP BY type").fetchall()
    by_type = {e["type"]: e["n"] for e in events}
    total_follows = db.execute("SELECT count(*) AS n FROM follows").fetchone()
    assert total_follows is not None
    # every real change has exactly one event: creations - deletions = rows left
    assert by_type.get("follow.created", 0) - by_type.get("follow.deleted", 0) == total_follows["n"]


def test_an_unfollow_locks_the_pair_of_users_before_it_deletes_the_follow(
        client: httpx.Client, signup: SignUp, db: psycopg.Connection[dict[str, Any]], database_url: str) -> None:
    """Deterministically, the race the churn above hits by chance (docs/adr/0152): A unfollows B (B's id lower)
    while another transaction holds B's users row and then wants A's, as a follow B->A does in id order. The
    unfollow must wait for B holding nothing: with the follows DELETE first, its trigger's write (or the delete
    itself) held a lock the other side needed, and Postgres aborted one of the two as a deadlock."""
    low, high = signup("lowid"), signup("highid")
    assert low.id < high.id
    assert client.put(f"/v1/following/{low.id}", headers=high.auth).status_code == 204
    with psycopg.connect(database_url, row_factory=dict_row) as other, ThreadPoolExecutor(1) as pool:
        other.execute("SET lock_timeout = '10s'")
        other.execute("SELECT id FROM users WHERE id = %s FOR NO KEY UPDATE", (low.id,))
        unfollow = pool.submit(client.delete, f"/v1/following/{low.id}", headers=high.auth)
        eventually(lambda: db.execute(
            "SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' "
            "AND query LIKE '%%FOR NO KEY UPDATE%%' AND pid <> %s", (other.info.backend_pid,)).fetchone(),
                   what="the unfollow waiting for the lower id's row")
        other.execute("SELECT id FROM users WHERE id = %s FOR NO KEY UPDATE", (high.id,))  # not held by it
        other.execute("DELETE FROM follows WHERE follower_id = %s AND followee_id = %s", (high.id, low.id))
        other.rollback()  # not held either; the unfollow goes on
        assert unfollow.result(timeout=30).status_code == 204
    assert db.execute("SELECT count(*) AS n FROM follows").fetchone() == {"n": 0}
    assert db.execute("SELECT id, following_count FROM users ORDER BY id").fetchall() == [
        {"id": low.id, "following_count": 0}, {"id": high.id, "following_count": 0}]
    assert db.execute("SELECT follower_id, followee_id FROM timeline_unfollows").fetchall() == [
        {"follower_id": high.id, "followee_id": low.id}]
