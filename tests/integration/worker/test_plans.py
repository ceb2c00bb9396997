"""The batch statements probe posts, outbox and timelines by key whatever the table statistics say: EXPLAIN plans on
tables that were never analyzed (as on a server with autovacuum off) and after ANALYZE. A batch must not cost a scan
of every post, outbox row or timeline row (docs/adr/0024)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.sql import SQL

from services.consumer import outbox_db
from services.core.db import PLAN_EACH_BATCH, make_pool
from services.worker import sql as q
from services.worker.fanout import CONSUMER
from testkit import plans

pytestmark = pytest.mark.integration

Db = psycopg.Connection[dict[str, Any]]

SCENARIO = """
INSERT INTO users (handle, token_hash) SELECT 'u' || i, sha256(('t' || i)::bytea) FROM generate_series(1, 1100) i;
INSERT INTO follows (follower_id, followee_id) SELECT 101 + (i % 1000), 1 + (i % 100) FROM generate_series(1, 1000) i;
UPDATE users SET follower_count = 10 WHERE id <= 100;
INSERT INTO posts (author_id, body) SELECT 1 + (i % 100), 'p' FROM generate_series(1, 20000) i;
INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
    SELECT gen_random_uuid(), 'post', id::text, 'post.created',
           jsonb_build_object('post_id', id, 'author_id', author_id) FROM posts;
INSERT INTO timelines (user_id, post_id, author_id)
    SELECT 101 + (p.id % 1000), p.id, p.author_id FROM posts p;
INSERT INTO processed_events (consumer, event_id) SELECT 'fanout', id FROM outbox;
-- Other users' rows: partitions of timelines (db/init/012) of some 200 pages each, not of 4, where scanning one is
-- as cheap as probing it.
INSERT INTO timelines (user_id, post_id, author_id)
    SELECT 2000 + (p.id * 10 + g) % 1000, p.id, p.author_id FROM posts p, generate_series(0, 9) g;
"""
BATCH = 500  # a full batch at the default WALFEED_WORKER_BATCH_SIZE: 30 ids got other plans than 200
CHECKED = {"posts", "outbox", "timelines", "processed_events"}  # tables a batch must never scan whole
PROBING_BY_KEY = {"TRIM", "UNFOLLOW", "DELETE_POSTS"}  # run as fanout.probing_by_key runs them


@pytest.fixture(params=["never analyzed", "analyzed"])
def loaded(request: pytest.FixtureRequest, database_url: str) -> Iterator[Db]:
    with plans.loaded(database_url, SCENARIO, *(["ANALYZE"] if request.param == "analyzed" else [])) as conn:
        yield conn


def scans(db: Db, statement: SQL, params: dict[str, Any]) -> set[tuple[str, str | None, str | None]]:
    return {(n["Node Type"], _table(n.get("Relation Name")), n.get("Index Name"))
            for n in plans.scans(plans.explain(db, statement, params))}


def _table(relation: str | None) -> str | None:
    """A partition of timelines (db/init/012) counts as timelines."""
    return "timelines" if plans.is_partition(relation) else relation


def test_batch_statements_probe_by_key(loaded: Db) -> None:
    posts = [r["id"] for r in loaded.execute("SELECT id FROM posts ORDER BY id DESC LIMIT %s", (BATCH,))]
    events = [r["id"] for r in loaded.execute("SELECT id FROM outbox LIMIT %s", (BATCH,))] + [uuid.uuid4()]
    users = list(range(101, 101 + BATCH))
    statements: dict[str, tuple[SQL, dict[str, Any]]] = {
        "KNOWN_EVENTS": (outbox_db.KNOWN_EVENTS, {"consumer": CONSUMER, "ids": events}),
        "POSTS_FOR_FANOUT": (q.POSTS_FOR_FANOUT, {"post_ids": posts}),
        "RECORD_DECISIONS": (q.RECORD_DECISIONS, {"post_ids": posts, "push": [True] * len(posts)}),
        "READ_DECISIONS": (q.READ_DECISIONS, {"post_ids": posts}),
        "FANOUT_BATCH": (q.FANOUT_BATCH, {"own": posts, "fan_out": [True] * len(posts)}),
        "DELETE_POSTS": (q.DELETE_POSTS, {"post_ids": posts}),
        "UNFOLLOW": (q.UNFOLLOW, {"followers": users, "followees": [1 + i % 100 for i in range(BATCH)]}),
        "TRIM": (q.TRIM, {"user_ids": users, "keep": 5}),
    }
    found = {}
    for name, (statement, params) in statements.items():
        with loaded.transaction():
            if name in PROBING_BY_KEY:
                loaded.execute(q.PROBE_BY_KEY)
            plan = scans(loaded, statement, params)
        whole = {s for s in plan if s[0] == "Seq Scan" and s[1] in CHECKED}
        unkeyed = {s for s in plan if s[2] == "posts_author_idx"}  # every live post, filtered by id afterwards
        if whole or unkeyed:
            found[name] = whole | unkeyed
    assert found == {}


def test_worker_connections_plan_each_execution(database_url: str) -> None:
    """Generic plans cached while the tables were small are what made a worker scan whole tables (docs/adr/0024)."""
    pool = make_pool(database_url, max_size=1, options=PLAN_EACH_BATCH)
    pool.open()
    try:
        with pool.connection() as conn:
            row: object = conn.execute("SHOW plan_cache_mode").fetchone()  # a dict: make_pool's type says tuple rows
            assert row == {"plan_cache_mode": "force_custom_plan"}
            assert conn.execute("SHOW jit").fetchone() == {"jit": "off"}  # type: ignore[comparison-overlap]
    finally:
        pool.close()
