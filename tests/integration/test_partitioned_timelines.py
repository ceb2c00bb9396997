"""Timelines hash-partitioned by user (db/init/012, docs/adr/0093): a statement about one user touches that user's
partition only, asserted on EXPLAIN plans with the parameters bound as the code binds them; the batch fan-out
stays a key-probe insert; the trim deletes exactly the rows it should (a ctid join did not, across partitions)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row
from psycopg.sql import SQL, Composable

from services.api import sql as api_sql
from services.core.db import PLAN_EACH_BATCH
from services.worker import fanout
from services.worker import sql as q
from testkit import plans
from testkit.plans import Plan

pytestmark = pytest.mark.integration

Db = psycopg.Connection[dict[str, Any]]

PARTITIONS = 32
# 3,000 users with 60 rows each (180,000 rows, about 5,600 per partition): partitions of a few dozen pages, so that
# the planner has a real choice between probing them and scanning them.
SCENARIO = """
INSERT INTO users (handle, token_hash) SELECT 'u' || i, sha256(('t' || i)::bytea) FROM generate_series(1, 3000) i;
INSERT INTO follows (follower_id, followee_id)
    SELECT 101 + (i % 2900), 1 + (i % 100) FROM generate_series(1, 5800) i ON CONFLICT DO NOTHING;
UPDATE users SET follower_count = 58 WHERE id <= 100;
INSERT INTO posts (author_id, body, fanned_out) SELECT 1 + (i % 100), 'p', true FROM generate_series(1, 12000) i;
INSERT INTO timelines (user_id, post_id, author_id)
    SELECT u, p.id, p.author_id FROM generate_series(1, 3000) u,
        LATERAL (SELECT id, author_id FROM posts WHERE id % 200 = u % 200 ORDER BY id DESC LIMIT 60) p;
"""
BATCH = 500


@pytest.fixture(params=["never analyzed", "analyzed"])
def loaded(request: pytest.FixtureRequest, database_url: str) -> Iterator[Db]:
    with psycopg.connect(database_url, row_factory=dict_row, options=PLAN_EACH_BATCH) as conn:
        conn.execute(SCENARIO)
        conn.commit()
        if request.param == "analyzed":
            conn.autocommit = True
            conn.execute("ANALYZE")
            conn.autocommit = False
        yield conn


def explain(db: Db, statement: Composable | str | bytes, params: dict[str, Any], *, analyze: bool = False) -> Plan:
    """The plan as JSON; with `analyze` the statement runs, in a transaction rolled back here."""
    plan = plans.explain(db, statement, params, analyze=analyze)
    db.rollback()
    return plan


def is_partition_scan(node: Plan) -> bool:
    return plans.is_partition(node.get("Relation Name")) and "Scan" in node["Node Type"]


def partition_scans(node: Plan) -> list[Plan]:
    return [n for n in plans.nodes(node) if is_partition_scan(n)]


def appends_over_partitions(root: Plan) -> list[Plan]:
    """Append and Merge Append nodes over timelines partitions (their children scan one each)."""
    return [n for n in plans.nodes(root) if n["Node Type"] in ("Append", "Merge Append")
            and any(is_partition_scan(c) for c in n.get("Plans", []))]


def one_partition_per_execution(root: Plan) -> list[str]:
    """Problems: an Append over the partitions that ran more partitions than it was executed (each execution, for
    one user, must run that user's partition only: run-time pruning), or a partition scanned outside an Append
    that ran more than once (a scan of the whole partition for a batch)."""
    problems = []
    appended: set[int] = set()
    for append in appends_over_partitions(root):
        ran = sum(child["Actual Loops"] for child in append["Plans"] if is_partition_scan(child))
        appended.update(id(child) for child in append["Plans"])
        if ran != append["Actual Loops"]:
            problems.append(f"{append['Node Type']} executed {append['Actual Loops']} times ran {ran} partitions")
    for scan in partition_scans(root):
        if id(scan) not in appended and scan["Actual Loops"] > 1:
            problems.append(f"{scan['Relation Name']} scanned {scan['Actual Loops']} times outside an Append")
    return problems


def test_timelines_is_hash_partitioned_with_its_key_and_indexes_on_every_partition(database_url: str) -> None:
    with psycopg.connect(database_url) as conn:
        strategy = conn.execute("SELECT partstrat, partnatts, pg_get_partkeydef('timelines'::regclass) "
                                "FROM pg_partitioned_table WHERE partrelid = 'timelines'::regclass").fetchone()
        assert strategy == ("h", 1, "HASH (user_id)")
        parts = conn.execute("SELECT count(*) FROM pg_inherits WHERE inhparent = 'timelines'::regclass").fetchone()
        assert parts == (PARTITIONS,)
        indexes = {r[0]: r[1] for r in conn.execute(
            "SELECT indexrelid::regclass::text, pg_get_indexdef(indexrelid) FROM pg_index "
            "WHERE indrelid = 'timelines'::regclass")}
        on = "ON ONLY public.timelines USING btree"
        assert indexes == {
            "timelines_pkey": f"CREATE UNIQUE INDEX timelines_pkey {on} (user_id, post_id)",
            "timelines_user_author_idx": f"CREATE INDEX timelines_user_author_idx {on} (user_id, author_id)",
            "timelines_post_idx": f"CREATE INDEX timelines_post_idx {on} (post_id)",
        }
        per_partition = conn.execute(
            "SELECT count(*) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent IN ('timelines_pkey'::regclass, 'timelines_user_author_idx'::regclass, "
            "'timelines_post_idx'::regclass)").fetchone()
        assert per_partition == (3 * PARTITIONS,)


def test_a_timeline_page_reads_one_partition_in_custom_and_generic_plans(loaded: Db) -> None:
    """The api binds `user` as a parameter; psycopg prepares a statement after 5 executions and Postgres may then
    keep a generic plan: a custom plan names the one partition, a generic one prunes the others at start-up."""
    params = {"user": 1500, "after": 0, "before": 2**63 - 1, "limit": 21}
    statement = api_sql.HOME_ABOVE_FLOOR["newest"]
    custom = partition_scans(explain(loaded, statement, params))
    assert len({s["Relation Name"] for s in custom}) == 1, custom

    text = statement.decode()
    names = list(dict.fromkeys(re.findall(r"%\((\w+)\)s", text)))
    positional = re.sub(r"%\((\w+)\)s", lambda m: f"${names.index(m.group(1)) + 1}", text)
    loaded.execute("SET plan_cache_mode = force_generic_plan")
    loaded.execute(f"PREPARE page ({', '.join('bigint' for _ in names)}) AS {positional}")  # a constant above
    row = loaded.execute(SQL("EXPLAIN (ANALYZE, TIMING OFF, FORMAT JSON) EXECUTE page ({})").format(
        SQL(", ").join(params[n] for n in names))).fetchone()
    loaded.rollback()
    assert row is not None
    appends = appends_over_partitions(plans.root(row["QUERY PLAN"]))
    assert appends, "a generic plan reads timelines through an Append of its partitions"
    for append in appends:
        assert append.get("Subplans Removed") == PARTITIONS - 1, append
        assert len([c for c in append["Plans"] if is_partition_scan(c)]) == 1


def test_per_user_statements_of_a_batch_run_one_partition_per_user(loaded: Db) -> None:
    users = list(range(101, 101 + BATCH))
    followees = [1 + i % 100 for i in range(BATCH)]
    statements: dict[str, tuple[SQL, dict[str, Any]]] = {
        "TRIM": (q.TRIM, {"user_ids": users, "keep": 20}),
        "UNFOLLOW": (q.UNFOLLOW, {"followers": users, "followees": followees}),
        "BACKFILL": (q.BACKFILL, {"followers": users, "followees": followees, "limit": 800}),
    }
    found = {}
    for name, (statement, params) in statements.items():
        if name != "BACKFILL":  # as fanout.probing_by_key runs them
            loaded.execute(q.PROBE_BY_KEY)
        plan = explain(loaded, statement, params, analyze=True)
        assert name == "BACKFILL" or appends_over_partitions(plan), name  # it did read timelines per user
        if problems := one_partition_per_execution(plan):
            found[name] = problems
    assert found == {}


def test_the_batch_fan_out_is_still_a_key_probe_insert(loaded: Db) -> None:
    """FANOUT_BATCH inserts into many partitions (tuple routing): its reads of posts stay key probes (ADR 0024,
    tests/integration/worker/test_plans.py) and it scans no partition of timelines (ON CONFLICT probes the unique
    index of each routed row's partition)."""
    posts = [r["id"] for r in loaded.execute("SELECT id FROM posts ORDER BY id DESC LIMIT %s", (BATCH,))]
    loaded.rollback()
    plan = explain(loaded, q.FANOUT_BATCH, {"own": posts, "fan_out": [True] * len(posts)}, analyze=True)
    scans = {(n["Node Type"], n.get("Relation Name"), n.get("Index Name")) for n in plans.scans(plan)}
    assert ("Index Scan", "posts", "posts_pkey") in scans, scans
    assert not [s for s in scans if s[1] == "posts" and s[0] == "Seq Scan"], scans
    assert not partition_scans(plan)
    assert plan["Node Type"] == "ModifyTable" and plan["Relation Name"] == "timelines"


def test_trim_deletes_only_the_trimmed_users_rows(database_url: str) -> None:
    """The trim deleted by ctid; in a partitioned table a ctid names a row per partition, so it also deleted rows
    of other users at the same places of other partitions."""
    with psycopg.connect(database_url, row_factory=dict_row) as conn:
        conn.execute(SCENARIO)
        conn.commit()
        before = conn.execute("SELECT user_id, count(*) AS n FROM timelines GROUP BY user_id").fetchall()
        with conn.transaction():
            trimmed = fanout.trim(conn, list(range(101, 111)), cap=20)
        after = {r["user_id"]: r["n"] for r in conn.execute(
            "SELECT user_id, count(*) AS n FROM timelines GROUP BY user_id").fetchall()}
    assert trimmed == 10
    assert {u: n for u, n in after.items() if u in range(101, 111)} == dict.fromkeys(range(101, 111), 20)
    assert {r["user_id"]: r["n"] for r in before if r["user_id"] not in range(101, 111)} == \
           {u: n for u, n in after.items() if u not in range(101, 111)}
