"""The home timeline costs the page, not the follow list (docs/adr/0096): one statement in the common case for
readers following 0, 20 and 5,000 accounts with celebrities among them, counted on the wire; their EXPLAIN plans
checked for index use (no sequential scans) and for the rows they read."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row
from psycopg.sql import SQL, Composed

from services.api import db, partitions, sql, store
from services.api.paging import Range
from testkit import plans

pytestmark = pytest.mark.integration

Db = psycopg.Connection[dict[str, Any]]

SCENARIO = """
INSERT INTO users (handle, token_hash) SELECT 'u' || i, sha256(('t' || i)::bytea) FROM generate_series(1, 6000) i;
-- user 1 follows 5,000 accounts (2..5001), user 2 follows 20 (3..22), user 6000 none; 2..11 are celebrities
INSERT INTO follows (follower_id, followee_id) SELECT 1, i FROM generate_series(2, 5001) i;
INSERT INTO follows (follower_id, followee_id) SELECT 2, i FROM generate_series(3, 22) i;
-- everyone else follows 40 accounts: the reader's follows are a small part of the table, as in production
INSERT INTO follows (follower_id, followee_id)
    SELECT u, 1 + ((u + k * 13) % 5999) FROM generate_series(3, 5999) u, generate_series(1, 40) k
    WHERE 1 + ((u + k * 13) % 5999) <> u ON CONFLICT DO NOTHING;
INSERT INTO posts (author_id, body, fanned_out)
    SELECT 2 + (i % 5000), 'post ' || i, CASE WHEN 2 + (i % 5000) <= 11 THEN false ELSE true END
    FROM generate_series(1, 60000) i;
INSERT INTO posts (author_id, body) SELECT 1 + (i % 6000), 'undecided' FROM generate_series(1, 300) i;
-- every post's own row, as the api writes it with the post (docs/adr/0157)
INSERT INTO timelines (user_id, post_id, author_id) SELECT author_id, id, author_id FROM posts;
INSERT INTO timelines (user_id, post_id, author_id)
    SELECT 1, id, author_id FROM posts WHERE fanned_out AND author_id <= 5001 ORDER BY id DESC LIMIT 800;
INSERT INTO timelines (user_id, post_id, author_id)
    SELECT 2, id, author_id FROM posts WHERE fanned_out AND author_id BETWEEN 3 AND 22;
UPDATE users SET timeline_floor = (SELECT min(post_id) FROM timelines WHERE user_id = 1) WHERE id = 1;
"""
READERS = {5000: 1, 20: 2, 0: 6000}  # accounts followed -> reader
PULLED = 10  # celebrities user 1 follows
PAGE = 21


@pytest.fixture
def loaded(database_url: str) -> Iterator[Db]:
    with plans.loaded(database_url, SCENARIO, "VACUUM ANALYZE") as conn:
        yield conn


def _scans(root: plans.Plan) -> set[tuple[str, str | None, str | None]]:
    return {(n["Node Type"], n.get("Relation Name"), _parent_index(n.get("Index Name"))) for n in plans.scans(root)
            if n.get("Relation Name") or n.get("Index Name")}


def _seq_scans(root: plans.Plan) -> set[tuple[str, str | None, str | None]]:
    """The plan's sequential scans but of timeline_unfollows: pairs that last until the worker's batch, a table the
    planner scans whole while its statistics say it is a page or two, and by its primary key once they say more
    (db/init/023 analyzes it every 50 changes, and a new analyze re-plans the statement: test below)."""
    return {s for s in _scans(root) if s[0] == "Seq Scan" and s[1] != "timeline_unfollows"}


def _rows_read(root: plans.Plan, relation: str) -> int:
    """Rows the statement's scans of `relation` returned, over all their loops (EXPLAIN ANALYZE)."""
    return sum(int(n["Actual Rows"]) * int(n["Actual Loops"]) for n in plans.scans(root)
               if n.get("Relation Name") == relation)


@pytest.mark.parametrize("order", ["newest", "oldest"])
def test_the_read_above_the_floor_reads_the_page_not_the_follow_list(loaded: Db, order: str) -> None:
    """One range scan of the reader's rows, the reader's pulled followees through follows_pulled_idx, their posts
    (the reader's own are among his rows: nothing reads posts by author but the pulled branch, docs/adr/0157): the
    rows it reads from follows are bounded by the celebrities and the page, not by the 5,000 accounts followed."""
    params = {"user": 1, "after": 0, "before": 2**63 - 1, "limit": PAGE}
    root = plans.explain(loaded, sql.HOME_ABOVE_FLOOR[order], params, analyze=True)
    for line in loaded.execute(b"EXPLAIN " + sql.HOME_ABOVE_FLOOR[order], params).fetchall():
        print(line["QUERY PLAN"])  # shown with pytest -s: the plans of docs/adr/0096
    scans = _scans(root)
    assert not _seq_scans(root), scans
    assert {"timelines_pkey", "follows_pulled_idx", "posts_pulled_idx"} <= {s[2] for s in scans}
    assert "posts_author_idx" not in {s[2] for s in scans}, scans
    partitions = {n["Relation Name"] for n in plans.nodes(root) if plans.is_partition(n.get("Relation Name"))}
    assert len(partitions) <= 1, partitions  # the user's partition of timelines only (docs/adr/0093)
    assert _rows_read(root, "follows") <= PULLED + 2 * PAGE, _rows_read(root, "follows")
    assert _rows_read(root, "posts") <= 4 * (PULLED + 3) * PAGE, _rows_read(root, "posts")


def _page(rows: list[dict[str, Any]]) -> list[int]:
    """The page's ids from the rows of the read above the floor: the reader's row first (floor, placed, again),
    then the page's (docs/adr/0156)."""
    assert rows and rows[0]["id"] is None and rows[0]["floor"] is not None, rows[:1]
    assert all(r["id"] is not None for r in rows[1:]), rows
    return [int(r["id"]) for r in rows[1:]]


def _value(conn: Db, query: str, params: tuple[object, ...] = ()) -> Any:
    row = conn.execute(query, params).fetchone()
    assert row is not None
    return row["v"]


def _definition(conn: Db, user: int, order: str, limit: int, after: int = 0) -> list[int]:
    """The first page above the reader's floor and `after`, computed from its definition: the posts of the reader's
    timeline written by others, of the pulled followees, and the reader's own from posts (whatever their fan-out, so
    a missing own row shows), alive."""
    direction = "DESC" if order == "newest" else "ASC"
    return [r["id"] for r in conn.execute(
        f"SELECT id FROM posts WHERE deleted_at IS NULL AND id > %(after)s"
        f" AND id >= (SELECT timeline_floor FROM users WHERE id = %(user)s)"
        f" AND (id IN (SELECT post_id FROM timelines WHERE user_id = %(user)s AND author_id <> %(user)s)"
        f"      OR fanned_out = false AND author_id IN (SELECT followee_id FROM follows"
        f"                                              WHERE follower_id = %(user)s AND pulled)"
        f"      OR author_id = %(user)s)"
        f" ORDER BY id {direction} LIMIT %(limit)s", {"user": user, "after": after, "limit": limit}).fetchall()]


@pytest.mark.parametrize("form", ["HOME_ABOVE_FLOOR", "HOME_ABOVE_FLOOR_CAREFUL"])
@pytest.mark.parametrize("order", ["newest", "oldest"])
def test_pulled_posts_are_read_only_within_the_reach_of_the_materialized_page(loaded: Db, order: str,
                                                                              form: str) -> None:
    """Reader 2 follows 20 accounts, 9 of them celebrities posting as often as the 11 others: a full page of
    materialized rows spans about two of their rounds, so the celebrities' posts farther than that page's far end
    cannot be on the page and are not read (each would be a heap fetch of its body): the pulled branch reads the
    heads and the posts within that reach, not `limit` posts of each celebrity. The page is the same as when every
    branch reads `limit` posts. Both forms of the read (docs/adr/0155, 0156): the pulled posts in one step, and heads
    first."""
    statement = getattr(sql, form)[order]
    # 30 posts of the reader's own from the middle of the history (with their own rows): beyond the reach of the
    # first page either way
    loaded.execute("UPDATE posts SET author_id = 2 WHERE id BETWEEN 30000 AND 30029 AND author_id > 22")
    loaded.execute("INSERT INTO timelines (user_id, post_id, author_id) SELECT 2, id, 2 FROM posts"
                   " WHERE id BETWEEN 30000 AND 30029 AND author_id = 2 ON CONFLICT DO NOTHING")
    celebrities = [r["followee_id"] for r in loaded.execute(
        "SELECT followee_id FROM follows WHERE follower_id = 2 AND pulled ORDER BY 1").fetchall()]
    assert len(celebrities) == 9, celebrities
    params = {"user": 2, "after": 0, "before": 2**63 - 1, "limit": PAGE}
    if order == "oldest":
        params["after"] = int(_value(loaded, "SELECT min(post_id) - 1 AS v FROM timelines WHERE user_id = 2"))
    direction = "DESC" if order == "newest" else "ASC"
    far = _value(loaded, f"SELECT id AS v FROM (SELECT post_id AS id FROM timelines WHERE user_id = 2 AND post_id > %s"
                         f" ORDER BY post_id {direction} LIMIT %s) x ORDER BY id {direction} OFFSET %s",
                 (params["after"], PAGE, PAGE - 1))
    within = "id >= %s" if order == "newest" else "id <= %s"
    reachable = _value(loaded, f"SELECT count(*) AS v FROM posts WHERE author_id = ANY(%s) AND fanned_out = false"
                               f" AND id > %s AND {within}", (celebrities, params["after"], far))
    assert 0 < reachable < 3 * len(celebrities), reachable  # about two rounds of theirs

    root = plans.explain(loaded, statement, params, analyze=True)
    read = sum(int(n["Actual Rows"]) * int(n["Actual Loops"]) for n in plans.scans(root)
               if n.get("Index Name") in ("posts_pulled_idx", "posts_author_idx"))
    assert read <= len(celebrities) + reachable, (read, reachable)  # at most a head each, then the posts within reach
    page = _page(loaded.execute(statement, params).fetchall())
    assert page == _definition(loaded, 2, order, PAGE, params["after"])


@pytest.mark.parametrize("order", ["newest", "oldest"])
def test_a_reader_of_more_celebrities_than_the_page_has_rows_is_read_again_heads_first(
        loaded: Db, database_url: str, order: str) -> None:
    """Reader 1 follows 10 celebrities; asked for 5 rows, the first statement (their posts in one step, for at most
    a page's number of them: docs/adr/0155, 0156) says `again` and reads none of their posts; the careful form (heads
    first, docs/adr/0096) reads the page, which is the definition's; the api sends both, and one for a page of 21."""
    few = {"user": 1, "after": 0, "before": 2**63 - 1, "limit": 5}
    root = plans.explain(loaded, sql.HOME_ABOVE_FLOOR[order], few, analyze=True)
    assert not [n for n in plans.scans(root) if n.get("Index Name") == "posts_pulled_idx" and int(n["Actual Loops"])]
    first = loaded.execute(sql.HOME_ABOVE_FLOOR[order], few).fetchall()
    assert first[0]["again"] and not {r["author_id"] for r in first} & set(range(2, 2 + PULLED)), first
    again = loaded.execute(sql.HOME_ABOVE_FLOOR_CAREFUL[order], few).fetchall()
    assert not again[0]["again"] and _page(again) == _definition(loaded, 1, order, 5)
    # the newest page has celebrities' posts (the first five above the floor happen not to)
    assert order == "oldest" or {r["author_id"] for r in again} & set(range(2, 2 + PULLED)), again

    async def pages() -> dict[int, tuple[int, list[int]]]:
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True,
                                                         row_factory=dict_row) as conn:
            out = {}
            floor = await (await conn.execute("SELECT timeline_floor FROM users WHERE id = 1")).fetchone()
            assert floor is not None
            after = 0 if order == "newest" else floor["timeline_floor"] - 1  # oldest first: from the floor up
            for fetch in (5, PAGE):
                probe = CountingConn(conn)
                page = Range(after=after, order="newest" if order == "newest" else "oldest", fetch=fetch)
                rows = await store.home_timeline(probe, 1, page)  # type: ignore[arg-type]
                out[fetch] = (probe.statements, [int(r["id"]) for r in rows])
            return out

    got = asyncio.run(pages())
    assert got[5] == (2, _page(again)), got
    assert got[PAGE] == (1, _definition(loaded, 1, order, PAGE)), got


@pytest.mark.parametrize("form", ["HOME_ABOVE_FLOOR", "HOME_ABOVE_FLOOR_CAREFUL"])
def test_the_readers_own_posts_are_on_the_page_at_once_and_once_whatever_their_fan_out(loaded: Db, form: str) -> None:
    """The api writes the author's own row with the post (sql.CREATE_POST, docs/adr/0157), so the reader's posts are
    on his page from the moment they are written: one not decided yet, one pushed and one pulled (a celebrity's own
    post, never fanned out) each once, read from his rows, the page equal to the definition (which reads his posts
    from posts). The branches are disjoint, so the page merges them without looking for duplicates (docs/adr/0155)."""
    made = [loaded.execute(sql.CREATE_POST, {"author": 2, "body": body, "key": None, "hash": None, "trace": None})
            .fetchone() for body in ("undecided", "pushed", "pulled")]
    ids = {r["body"]: r["id"] for r in made if r is not None}
    # the worker's decisions, and its own rows written again (services/worker/sql.py FANOUT_BATCH: a no-op here)
    loaded.execute("UPDATE posts SET fanned_out = body = 'pushed' WHERE id = ANY(%s) AND body <> 'undecided'",
                   ([ids["pushed"], ids["pulled"]],))
    loaded.execute("INSERT INTO timelines (user_id, post_id, author_id) SELECT 2, unnest(%s::bigint[]), 2"
                   " ON CONFLICT DO NOTHING", ([ids["pushed"], ids["pulled"]],))
    params = {"user": 2, "after": 0, "before": 2**63 - 1, "limit": PAGE}
    page = _page(loaded.execute(getattr(sql, form)["newest"], params).fetchall())
    assert page[:3] == sorted(ids.values(), reverse=True), (page, ids)
    assert len(page) == len(set(page)) == PAGE and page == _definition(loaded, 2, "newest", PAGE)


def test_rows_are_checked_against_follows_only_while_the_reader_has_an_unfollow_pending(
        loaded: Db, database_url: str) -> None:
    """The common form never probes the page's rows in follows (only the pulled followees are read there, once);
    after an unfollow (the follows delete records it: db/init/022) it says `again` and reads no celebrity's posts,
    and the careful form probes every row and leaves out the unfollowed author's rows, still materialized
    (docs/adr/0150, 0156): the api sends two statements while the unfollow is pending, one before it."""
    params = {"user": 1, "after": 0, "before": 2**63 - 1, "limit": PAGE}
    root = plans.explain(loaded, sql.HOME_ABOVE_FLOOR["newest"], params, analyze=True)
    assert _rows_read(root, "follows") == PULLED, _rows_read(root, "follows")
    page = loaded.execute(sql.HOME_ABOVE_FLOOR["newest"], params).fetchall()
    assert not page[0]["again"] and loaded.execute(sql.HOME_ABOVE_FLOOR_CAREFUL["newest"], params).fetchall() == page
    gone = next(r["author_id"] for r in page[1:] if r["author_id"] > PULLED + 1)
    loaded.execute("DELETE FROM follows WHERE follower_id = 1 AND followee_id = %s", (gone,))
    assert loaded.execute("SELECT followee_id FROM timeline_unfollows WHERE follower_id = 1").fetchall() == [
        {"followee_id": gone}]
    root = plans.explain(loaded, sql.HOME_ABOVE_FLOOR["newest"], params, analyze=True)
    assert _rows_read(root, "follows") <= PULLED, _rows_read(root, "follows")  # none when `again` stops at the pair
    assert not [n for n in plans.scans(root) if n.get("Index Name") == "posts_pulled_idx" and int(n["Actual Loops"])]
    assert loaded.execute(sql.HOME_ABOVE_FLOOR["newest"], params).fetchall()[0]["again"]
    root = plans.explain(loaded, sql.HOME_ABOVE_FLOOR_CAREFUL["newest"], params, analyze=True)
    assert PULLED < _rows_read(root, "follows") <= PULLED + 2 * PAGE, _rows_read(root, "follows")
    after = loaded.execute(sql.HOME_ABOVE_FLOOR_CAREFUL["newest"], params).fetchall()
    assert gone not in {r["author_id"] for r in after}
    kept = [r["id"] for r in page[1:] if r["author_id"] != gone]
    assert _page(after)[:len(kept)] == kept and len(after) == len(page)  # refilled from older rows

    async def read() -> tuple[int, list[int]]:
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True,
                                                         row_factory=dict_row) as conn:
            probe = CountingConn(conn)
            rows = await store.home_timeline(probe, 1, Range(fetch=PAGE))  # type: ignore[arg-type]
            return probe.statements, [int(r["id"]) for r in rows]

    assert asyncio.run(read()) == (2, _page(after))


@pytest.mark.parametrize("order", ["newest", "oldest"])
def test_the_read_below_the_floor_descends_once_per_followed_account_then_reads_a_bounded_page(
        loaded: Db, order: str) -> None:
    params = {"user": 1, "after": 0, "before": 2**63 - 1, "limit": PAGE}
    root = plans.explain(loaded, sql.HOME_BELOW_FLOOR[order], params, analyze=True)
    for line in loaded.execute(b"EXPLAIN " + sql.HOME_BELOW_FLOOR[order], params).fetchall():
        print(line["QUERY PLAN"])
    scans = _scans(root)
    assert not [s for s in scans if s[0] == "Seq Scan"], scans
    assert "posts_author_idx" in {s[2] for s in scans}, scans
    # one head per followed account and the reader, then at most PAGE authors x PAGE posts, then the page itself
    assert _rows_read(root, "posts") <= 5001 + PAGE * PAGE + PAGE, _rows_read(root, "posts")


def _prepared_generic(loaded: Db, statement: bytes, explain: bool = True) -> Composed:
    """PREPARE `statement` as `page` with a generic plan, as the api's connections run it (services/api/db.py
    session_options): planned once without the values. Returns the EXPLAIN ANALYZE of its execution for reader 1's
    first page, or with `explain` false the execution itself."""
    text = statement.decode()
    names = list(dict.fromkeys(re.findall(r"%\((\w+)\)s", text)))
    positional = re.sub(r"%\((\w+)\)s", lambda m: f"${names.index(m.group(1)) + 1}", text)
    params = {"user": 1, "after": 0, "before": 2**63 - 1, "limit": PAGE}
    loaded.execute("SET plan_cache_mode = force_generic_plan")
    loaded.execute(f"PREPARE page ({', '.join('bigint' for _ in names)}) AS {positional}")  # a constant above
    return SQL("{}EXECUTE page ({})").format(SQL("EXPLAIN (ANALYZE, TIMING OFF, FORMAT JSON) " if explain else ""),
                                            SQL(", ").join(params[n] for n in names))


@pytest.mark.parametrize("statement", ["HOME_ABOVE_FLOOR", "HOME_BELOW_FLOOR"])
@pytest.mark.parametrize("order", ["newest", "oldest"])
def test_the_generic_plans_the_api_runs_use_indexes_and_one_partition(loaded: Db, statement: str,
                                                                      order: str) -> None:
    """The api's connections run prepared statements' generic plans (services/api/db.py session_options): planned
    once without the values, the partitions of timelines pruned when the plan starts."""
    execute = _prepared_generic(loaded, getattr(sql, statement)[order])
    row = loaded.execute(execute).fetchone()
    assert row is not None
    root = plans.root(row["QUERY PLAN"])
    assert not _seq_scans(root), _scans(root)
    partitions = {n["Relation Name"] for n in plans.scans(root) if plans.is_partition(n.get("Relation Name"))}
    assert len(partitions) <= 1, partitions
    assert _rows_read(root, "follows") <= (PULLED + 2 * PAGE if statement == "HOME_ABOVE_FLOOR" else 5000 + PAGE)


def _reader_partition(loaded: Db, user: int) -> partitions.Partition:
    layout = partitions.Layout.parse(loaded.execute(partitions.LAYOUT).fetchall())
    assert layout is not None
    return layout.of(user)


@pytest.mark.parametrize("order", ["newest", "oldest"])
def test_the_named_read_plans_and_locks_one_partition_where_the_parents_generic_plan_locks_every_one(
        loaded: Db, order: str) -> None:
    """The generic plan of the read through the parent holds all 32 partitions and locks them all each time it
    starts (Postgres 15 locks a cached plan's relations before it prunes), past the 16 locks a backend takes on the
    fast path; the read naming the reader's partition (docs/adr/0153) plans and locks that one, with the same scans
    otherwise and the same page."""
    part = _reader_partition(loaded, 1)
    statements = {"parent": sql.HOME_ABOVE_FLOOR[order],
                  "named": sql.home_above_floor(order, part.schema, part.name, part.constraint)}
    locked: dict[str, Any] = {}
    pages, scans = {}, {}
    for kind, statement in statements.items():
        execute = _prepared_generic(loaded, statement, explain=False)
        row = loaded.execute(SQL("EXPLAIN (ANALYZE, TIMING OFF, FORMAT JSON) ") + execute).fetchone()
        assert row is not None
        scans[kind] = {(s[0], _parent_index(s[2])) for s in _scans(plans.root(row["QUERY PLAN"]))}
        verbose = "\n".join(r["QUERY PLAN"] for r in loaded.execute(SQL("EXPLAIN (VERBOSE) ") + execute))
        assert "walfeed_timeline_partition_is" not in verbose  # the check folded into the plan (db/init/024)
        with loaded.transaction(force_rollback=True):
            pages[kind] = [r["id"] for r in loaded.execute(execute).fetchall()]
            locked[kind] = loaded.execute(
                "SELECT count(*) FILTER (WHERE c.relname ~ '^timelines') AS timelines, "
                "count(*) FILTER (WHERE NOT l.fastpath) AS slow FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
                "WHERE l.pid = pg_backend_pid() AND l.locktype = 'relation' "
                "AND c.relnamespace <> 'pg_catalog'::regnamespace").fetchone()  # not this query's own
        loaded.execute("DEALLOCATE page")
    assert pages["named"] == pages["parent"] and len(pages["named"]) == PAGE + 1, pages  # the reader's row too
    assert scans["named"] == scans["parent"], scans
    assert locked["named"] == {"timelines": 2, "slow": 0}, locked  # the partition and its primary key's index
    assert locked["parent"]["timelines"] >= 33 and locked["parent"]["slow"] > 0, locked


def test_a_generic_plan_reads_the_pending_unfollows_by_key_once_their_statistics_say_they_are_many(
        loaded: Db) -> None:
    """The api's generic plan of the read, made while timeline_unfollows is empty, scans it whole (nothing to
    read); an outage of the worker fills it, the next analyze re-plans the prepared statement in the same session,
    and the reader's check is a descent of its primary key again (docs/adr/0152)."""
    execute = _prepared_generic(loaded, sql.HOME_ABOVE_FLOOR["newest"])

    def unfollows_scan() -> str:
        row = loaded.execute(execute).fetchone()
        assert row is not None
        return next(str(n["Node Type"]) for n in plans.scans(plans.root(row["QUERY PLAN"]))
                    if n.get("Relation Name") == "timeline_unfollows")

    assert unfollows_scan() == "Seq Scan"  # of an empty table
    loaded.execute("INSERT INTO timeline_unfollows (follower_id, followee_id) "
                   "SELECT u, 1 + ((u + k * 13) % 5999) FROM generate_series(3, 5999) u, generate_series(1, 4) k")
    loaded.execute("ANALYZE timeline_unfollows")
    assert unfollows_scan() in {"Index Only Scan", "Index Scan"}
    options = loaded.execute("SELECT reloptions FROM pg_class WHERE relname = 'timeline_unfollows'").fetchone()
    assert options is not None and "autovacuum_analyze_threshold=50" in options["reloptions"]


async def _plan_cache_mode(database_url: str) -> tuple[str, int | None]:
    pool = db.make_pool(database_url, min_size=1, max_size=1, timeout=5, options=db.session_options(2.0))
    await pool.open()
    try:
        async with pool.connection() as conn:
            row = await (await conn.execute("SHOW plan_cache_mode")).fetchone()
            kept = conn.prepared_max
    finally:
        await pool.close()
    assert row is not None
    return str(row["plan_cache_mode"]), kept


def test_api_connections_run_generic_plans_and_keep_every_partitions_read_prepared(database_url: str) -> None:
    """Generic plans (db.session_options), and room for the home read's 128 texts (2 orders x 2 forms x 32
    partitions, docs/adr/0153 and 0155) beside the api's other statements."""
    assert asyncio.run(_plan_cache_mode(database_url)) == ("force_generic_plan", db.PREPARED_MAX)
    assert db.PREPARED_MAX >= 2 * 2 * 32 + 100


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


async def _count_statements(database_url: str, named: bool) -> dict[str, int]:
    """Statements per page; `named`: the api's way, naming the reader's partition (the layout read before)."""
    counts = {}
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True, row_factory=dict_row) as conn:
        names = store.TimelinePartitions() if named else None
        if names is not None:
            assert await names.of(conn, 1) is not None
        for follows, user in READERS.items():
            for order in ("newest", "oldest"):
                probe = CountingConn(conn)
                after = 0 if order == "newest" else 10**9  # oldest first: above every post, nothing to read
                rows = await store.home_timeline(probe, user, Range(after=after, order=order, fetch=PAGE),  # type: ignore[arg-type]
                                                 names)
                assert rows or order == "oldest" or follows == 0
                counts[f"follows {follows} {order}"] = probe.statements
        floor = await (await conn.execute("SELECT timeline_floor FROM users WHERE id = 1")).fetchone()
        assert floor is not None
        for name, page in (("straddling newest", Range(before=floor["timeline_floor"] + 5, fetch=PAGE)),
                           ("straddling oldest", Range(after=floor["timeline_floor"] - 5, order="oldest", fetch=PAGE))):
            probe = CountingConn(conn)  # the part above the floor, then the part below it
            rows = await store.home_timeline(probe, 1, page, names)  # type: ignore[arg-type]
            assert len(rows) == PAGE
            counts[name] = probe.statements
    return counts


@pytest.mark.parametrize("named", [False, True], ids=["parent", "named"])
def test_a_page_is_one_statement_whatever_the_accounts_followed_and_two_across_the_floor(
        loaded: Db, database_url: str, named: bool) -> None:
    counts = asyncio.run(_count_statements(database_url, named))
    assert {n for k, n in counts.items() if k.startswith("follows")} == {1}, counts
    assert counts["straddling newest"] == counts["straddling oldest"] == 2, counts


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
