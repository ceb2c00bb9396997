"""The home read names the reader's partition of timelines (docs/adr/0153): the partition the api computes is the
one Postgres routes the user's rows to, before and after a partition is split; a named read returns the page the
read through the parent returns; and when the layout changes under a running api (a split, a partition detached
under its name, dropped, or not granted) the read notices in the statement itself and reads through the parent
until it has read the layout again."""

from __future__ import annotations

import asyncio
import random
import re
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from services.api import partitions, store
from services.api.paging import Range
from services.api.partitions import Layout
from testkit import plans
from testkit.clock import Clock

pytestmark = pytest.mark.integration

USERS = 300
SCENARIO = """
INSERT INTO users (handle, token_hash) SELECT 'u' || i, sha256(('t' || i)::bytea) FROM generate_series(1, 300) i;
INSERT INTO follows (follower_id, followee_id)
    SELECT u, 1 + ((u + k) % 300) FROM generate_series(1, 300) u, generate_series(1, 12) k;
INSERT INTO posts (author_id, body, fanned_out)
    SELECT 1 + (i % 300), 'post ' || i, true FROM generate_series(1, 9000) i;
INSERT INTO timelines (user_id, post_id, author_id)
    SELECT f.follower_id, p.id, p.author_id FROM follows f JOIN posts p ON p.author_id = f.followee_id;
"""
# One partition split in two, as docs/database.md describes it; `keep` leaves the old table, detached, under its
# name (the step an operator might do last, or forget).
SPLIT = """
ALTER TABLE timelines DETACH PARTITION timelines_p05;
CREATE TABLE timelines_p05_a PARTITION OF timelines FOR VALUES WITH (MODULUS 64, REMAINDER 5);
CREATE TABLE timelines_p05_b PARTITION OF timelines FOR VALUES WITH (MODULUS 64, REMAINDER 37);
INSERT INTO timelines SELECT * FROM timelines_p05;
"""

Db = psycopg.Connection[dict[str, Any]]
AsyncDb = psycopg.AsyncConnection[dict[str, Any]]


@pytest.fixture
def loaded(database_url: str) -> Iterator[Db]:
    with plans.loaded(database_url, SCENARIO, "ANALYZE") as conn:
        yield conn


def _routed(db: Db) -> dict[int, str]:
    """Each user id in timelines -> the partition Postgres stored its rows in."""
    rows = db.execute("SELECT DISTINCT user_id, tableoid::regclass::text AS part FROM timelines").fetchall()
    routed = {int(r["user_id"]): str(r["part"]) for r in rows}
    assert len(routed) == len({int(r["user_id"]) for r in rows})  # one partition per user
    return routed


def _layout(db: Db) -> Layout:
    layout = Layout.parse(db.execute(partitions.LAYOUT).fetchall())
    assert layout is not None
    return layout


def test_the_partition_the_api_computes_is_the_one_postgres_stores_each_users_rows_in(loaded: Db) -> None:
    """Keys across the whole bigint range (the hash folds the high half into the low, and negative keys
    differently), before and after one partition is split into two of twice its modulus."""
    keys = {*range(USERS + 1, USERS + 2000), -1, -(2**63), 2**63 - 1, 2**32, 2**32 + 1}
    keys |= {random.randrange(-(2**63), 2**63) for _ in range(2000)}
    with loaded.cursor() as cur:
        cur.executemany("INSERT INTO timelines (user_id, post_id, author_id) VALUES (%s, 1, 1)", [(k,) for k in keys])
    for split in (False, True):
        if split:
            with loaded.transaction():
                loaded.execute(SPLIT + "DROP TABLE timelines_p05;")
        layout, routed = _layout(loaded), _routed(loaded)
        assert len(layout.partitions) == (33 if split else 32)
        wrong = {user: (part, layout.of(user).name) for user, part in routed.items() if layout.of(user).name != part}
        assert not wrong, list(wrong.items())[:5]


class Recording:
    """The statements a store function sends on an async connection."""

    def __init__(self, conn: AsyncDb) -> None:
        self.conn, self.sent = conn, list[bytes]()

    async def execute(self, query: Any, *args: Any, **kwargs: Any) -> Any:
        self.sent.append(query if isinstance(query, bytes) else str(query).encode())
        return await self.conn.execute(query, *args, **kwargs)


PAGES = [Range(fetch=21), Range(before=6000, fetch=21), Range(after=3000, order="oldest", fetch=21),
         Range(after=8990, order="oldest", fetch=21)]


async def _pages(conn: AsyncDb, users: list[int], names: store.TimelinePartitions | None,
                 ) -> tuple[dict[tuple[int, int], list[int]], list[bytes]]:
    """The pages of `users` (each of PAGES) and the statements they took."""
    probe = Recording(conn)
    pages = {}
    for user in users:
        for i, page in enumerate(PAGES):
            rows = await store.home_timeline(probe, user, page, names)  # type: ignore[arg-type]
            pages[user, i] = [int(r["id"]) for r in rows]
    return pages, probe.sent


def _named(sent: list[bytes]) -> list[str]:
    """The partitions the home reads among `sent` named, in order."""
    return [m.decode() for text in sent for m in re.findall(rb'FROM "public"\."(timelines_p\w+)" t', text)]


def _through_parent(sent: list[bytes]) -> int:
    return sum(1 for text in sent if b'FROM "timelines" t' in text)


async def _scenario(database_url: str, loaded: Db) -> None:
    readers = list(range(1, USERS + 1, 7))
    before = _layout(loaded)
    in_p05 = [u for u in readers if before.of(u).name == "timelines_p05"]
    assert in_p05
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True, row_factory=dict_row) as conn:
        conn.prepare_threshold = 0  # every statement prepared at once: its plan (and its check) outlives the split
        await conn.execute("SET plan_cache_mode = force_generic_plan")
        clocks = Clock(0.0), Clock(0.0)
        first, second = (store.TimelinePartitions(refresh=60, clock=clock) for clock in clocks)
        expected, _ = await _pages(conn, readers, None)
        for names in (first, second):
            got, sent = await _pages(conn, readers, names)
            assert got == expected
            assert _through_parent(sent) == 0  # every page named its reader's partition
            assert set(_named(sent)) == {before.of(u).name for u in readers}
            assert sent.count(partitions.LAYOUT.encode()) == 1  # the layout read once

        # Split under the running api, the old table kept (detached) under its name, its rows a stale copy now.
        loaded.execute(SPLIT)
        loaded.execute("DELETE FROM timelines WHERE user_id = %s AND post_id > 8000", (in_p05[0],))
        expected, _ = await _pages(conn, in_p05, None)
        got, sent = await _pages(conn, in_p05, first)
        assert got == expected  # not the detached copy's
        assert _named(sent) == ["timelines_p05"]  # its check failed once...
        assert _through_parent(sent) == len(sent) - 1  # ...then the parent until the layout is read again

        # The old table dropped: `second` still names it, the statement fails, the read does not.
        loaded.execute("DROP TABLE timelines_p05")
        got, sent = await _pages(conn, in_p05, second)
        assert got == expected
        assert _named(sent) == ["timelines_p05"] and _through_parent(sent) == len(sent) - 1

        # The layout read again (its refresh due): the new partitions are named.
        for names, clock in zip((first, second), clocks, strict=True):
            clock.now = 61
            got, sent = await _pages(conn, in_p05, names)
            assert got == expected
            assert _through_parent(sent) == 0 and set(_named(sent)) <= {"timelines_p05_a", "timelines_p05_b"}


async def _revoked(database_url: str, loaded: Db) -> None:
    """A partition the reading role may not read (made by a split, before the next bootstrap-roles grants it)."""
    reader = next(u for u in range(1, USERS + 1) if _layout(loaded).of(u).name == "timelines_p07")
    role = f"reader_{abs(hash(database_url)) % 10**8}"
    loaded.execute(f"CREATE ROLE {role}")
    try:
        loaded.execute(f"GRANT SELECT ON users, follows, posts, timelines, timeline_unfollows TO {role}")
        loaded.execute(f"GRANT SELECT ON timelines_p00 TO {role}")
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True,
                                                         row_factory=dict_row) as conn:
            expected, _ = await _pages(conn, [reader], None)
            await conn.execute(f"SET ROLE {role}")
            names = store.TimelinePartitions()
            got, sent = await _pages(conn, [reader], names)
            assert got == expected
            assert _named(sent) == ["timelines_p07"]  # refused once, then through the parent
            assert _through_parent(sent) == len(sent) - 2  # less the layout's read and the refused statement
    finally:
        loaded.execute(f"DROP OWNED BY {role}")
        loaded.execute(f"DROP ROLE {role}")


def test_named_reads_return_the_parents_pages_and_survive_a_split_under_a_running_api(
        database_url: str, loaded: Db) -> None:
    asyncio.run(_scenario(database_url, loaded))


def test_a_partition_the_role_may_not_read_is_read_through_the_parent(database_url: str, loaded: Db) -> None:
    asyncio.run(_revoked(database_url, loaded))
