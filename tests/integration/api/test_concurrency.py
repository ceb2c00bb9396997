"""Follower and following counts stay exact when many clients follow and unfollow at once."""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import psycopg
import pytest

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
