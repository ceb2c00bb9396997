"""The home timeline costs a constant number of index-backed statements per page, whatever the number of
followed accounts: counted on the wire, and their EXPLAIN plans checked for index use (no sequential scans)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from services.api import sql, store
from testkit import plans

pytestmark = pytest.mark.integration

Db = psycopg.Connection[dict[str, Any]]

SCENARIO = """
INSERT INTO users (handle, token_hash) SELECT 'u' || i, sha256(('t' || i)::bytea) FROM generate_series(1, 600) i;
-- user 1 follows 2..501; 2..21 are celebrities
INSERT INTO follows (follower_id, followee_id) SELECT 1, i FROM generate_series(2, 501) i;
-- everyone else follows 40 accounts and has a materialized timeline of their own
INSERT INTO follows (follower_id, followee_id)
    SELECT u, 1 + ((u + k * 13) % 600) FROM generate_series(2, 600) u, generate_series(1, 40) k
    WHERE 1 + ((u + k * 13) % 600) <> u ON CONFLICT DO NOTHING;
INSERT INTO posts (author_id, body, fanned_out)
    SELECT 2 + (i % 599), 'post ' || i, CASE WHEN 2 + (i % 599) <= 21 THEN false ELSE true END
    FROM generate_series(1, 60000) i;
INSERT INTO posts (author_id, body) SELECT 1 + (i % 600), 'pending' FROM generate_series(1, 300) i;
INSERT INTO timelines (user_id, post_id, author_id)
    SELECT 1, id, author_id FROM posts WHERE fanned_out AND author_id <= 501 ORDER BY id DESC LIMIT 800;
INSERT INTO timelines (user_id, post_id, author_id)
    SELECT u, p.id, p.author_id FROM generate_series(2, 600) u,
        LATERAL (SELECT id, author_id FROM posts WHERE id % 600 = u ORDER BY id DESC LIMIT 100) p;
UPDATE users SET timeline_floor = (SELECT min(post_id) FROM timelines WHERE user_id = 1) WHERE id = 1;
"""


@pytest.fixture
def loaded(database_url: str) -> Iterator[Db]:
    with psycopg.connect(database_url, autocommit=True, row_factory=dict_row) as conn:
        conn.execute(SCENARIO)
        conn.execute("ANALYZE")
        yield conn


@pytest.mark.parametrize("query", ["TIMELINE_ABOVE_FLOOR", "TIMELINE_FAN_IN"])
def test_timeline_statements_use_indexes_only(loaded: Db, query: str) -> None:
    floor = loaded.execute("SELECT timeline_floor FROM users WHERE id = 1").fetchone()["timeline_floor"]  # type: ignore[index]
    params = {"user": 1, "before": 2**63 - 1 if query == "TIMELINE_ABOVE_FLOOR" else floor,
              "floor": floor, "limit": 21}
    root = plans.explain(loaded, getattr(sql, query), params)
    scans = {(n["Node Type"], n.get("Relation Name"), _parent_index(n.get("Index Name"))) for n in plans.scans(root)
             if n.get("Relation Name") or n.get("Index Name")}
    partitions = {n["Relation Name"] for n in plans.nodes(root) if plans.is_partition(n.get("Relation Name"))}
    assert len(partitions) <= 1, partitions  # the user's partition of timelines only (docs/adr/0093)
    for line in loaded.execute("EXPLAIN " + getattr(sql, query), params).fetchall():
        print(line["QUERY PLAN"])  # shown with pytest -s: the plans of docs/adr/0031
    assert not [s for s in scans if s[0] == "Seq Scan"], scans
    used = {s[2] for s in scans}
    if query == "TIMELINE_ABOVE_FLOOR":
        assert {"timelines_pkey", "posts_pulled_idx", "posts_pending_idx", "posts_author_idx"} <= used, used
    else:
        assert "posts_author_idx" in used, used


def _parent_index(name: str | None) -> str | None:
    """timelines_p07_pkey, the primary key's index on a partition of timelines (db/init/012), is timelines_pkey."""
    return "timelines_pkey" if name is not None and re.fullmatch(r"timelines_p\d\d_pkey", name) else name


class CountingConn:
    """Counts the statements a store function sends (on an async connection)."""

    def __init__(self, conn: psycopg.AsyncConnection[dict[str, Any]]) -> None:
        self.conn, self.statements = conn, 0

    async def execute(self, *args: Any, **kwargs: Any) -> Any:
        self.statements += 1
        return await self.conn.execute(*args, **kwargs)

    def transaction(self) -> Any:
        return self.conn.transaction()


async def _count_statements(database_url: str) -> dict[str, int]:
    counts = {}
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True, row_factory=dict_row) as conn:
        for user, follows in ((1, 500), (600, 0)):
            probe = CountingConn(conn)
            rows = await store.home_timeline(probe, user, None, 21)  # type: ignore[arg-type]
            assert rows
            counts[f"follows {follows}"] = probe.statements
        probe = CountingConn(conn)  # a page straddling the floor: materialized part, then fan-in
        floor = await (await conn.execute("SELECT timeline_floor FROM users WHERE id = 1")).fetchone()
        assert floor is not None
        await store.home_timeline(probe, 1, floor["timeline_floor"] + 5, 21)  # type: ignore[arg-type]
        counts["straddling"] = probe.statements
    return counts


def test_statements_per_page_do_not_grow_with_followed_accounts(loaded: Db, database_url: str) -> None:
    counts = asyncio.run(_count_statements(database_url))
    assert counts["follows 500"] == counts["follows 0"] <= 4, counts
    assert counts["straddling"] <= 4, counts


def test_idempotency_key_lookup_uses_the_partial_unique_index(loaded: Db) -> None:
    """db/init/014 indexes only the posts that have a key; the api's lookup by key still finds them by index, and
    its insert's ON CONFLICT names that index's predicate (no arbiter otherwise)."""
    loaded.execute("UPDATE posts SET idempotency_key = 'k' || id WHERE id % 10 = 0")
    loaded.execute("ANALYZE posts")
    root = plans.explain(loaded, sql.POST_BY_KEY, {"author": 2, "key": "k10"})
    scans = {(n["Node Type"], n.get("Index Name")) for n in plans.nodes(root)}
    assert any(index == "posts_idempotency_idx" for _, index in scans), scans
    assert "Seq Scan" not in {kind for kind, _ in scans}, scans
    assert loaded.execute("SELECT count(*) AS n FROM pg_constraint WHERE conname = "
                          "'posts_author_id_idempotency_key_key'").fetchone() == {"n": 0}



@pytest.mark.parametrize("recipient", [1, 2])
def test_marking_notifications_read_probes_the_newest_one_by_index(database_url: str, recipient: int) -> None:
    """POST /v1/notifications/read finds the recipient's newest notification with one probe of
    the recipient's index: a user mentioned 20,000 times (1) costs what a user mentioned 20 times (2) does
    (no aggregate over their notifications, which a mention-spammed user's request ran past the statement
    timeout)."""
    with psycopg.connect(database_url, autocommit=True, row_factory=dict_row) as conn:
        conn.execute("INSERT INTO users (handle, token_hash) SELECT 'u' || i, sha256(('t' || i)::bytea) "
                     "FROM generate_series(1, 1000) i")
        conn.execute("INSERT INTO notifications (recipient_id, kind, actor_id, event_id) "
                     "SELECT CASE WHEN i % 3 = 0 THEN 1 ELSE 2 + i % 998 END, 'mention', 1000, gen_random_uuid() "
                     "FROM generate_series(1, 60000) i")
        conn.execute("ANALYZE notifications")
        with conn.transaction(force_rollback=True):
            root = plans.explain(conn, sql.MARK_READ, {"user": recipient, "up_to": 2**62}, analyze=True)
    kinds = {n["Node Type"] for n in plans.nodes(root)}
    assert "Aggregate" not in kinds, kinds
    probes = [(n["Node Type"], n.get("Index Name"), n["Actual Rows"], n.get("Rows Removed by Filter", 0))
              for n in plans.scans(root) if n.get("Relation Name") == "notifications"]
    # One index scan stopped at its first row. For the spammed user, whose notifications are a third of all, the
    # planner may walk the primary key down from the newest id instead: as cheap, as the newest rows are theirs.
    assert len(probes) == 1 and probes[0][0] in {"Index Scan", "Index Only Scan"}, probes
    index, rows, skipped = probes[0][1:]
    assert index in {"notifications_recipient_idx", "notifications_pkey"} and rows == 1 and skipped < 10, probes
    if recipient == 2:
        assert index == "notifications_recipient_idx", probes
