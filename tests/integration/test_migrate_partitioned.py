"""Migration 012 on a database migrated before it (timelines a single table, with rows, an owner and grants): the
rows, the owner and the grants move to the partitioned table, a statement prepared before it still runs, running
it again changes nothing, and the result is the schema of a database migrated from scratch (docs/adr/0093)."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql

from services.core.migrate import apply_schema, migration_files
from testkit.infra import Infra
from testkit.resources import drop_database, unique
from tests.integration import migrated

pytestmark = pytest.mark.integration

MIGRATION = "012_timelines_partitioned.sql"
ROWS = """
INSERT INTO users (handle, token_hash) SELECT 'u' || i, sha256(('t' || i)::bytea) FROM generate_series(1, 300) i;
-- pushed: migration 025 (the own rows of posts not pushed) leaves these rows as they are
INSERT INTO posts (author_id, body, fanned_out) SELECT 1 + (i % 300), 'p', true FROM generate_series(1, 3000) i;
INSERT INTO timelines (user_id, post_id, author_id) SELECT 1 + (p.id * 7 + g) % 300, p.id, p.author_id
    FROM posts p, generate_series(0, 4) g;
"""
# What a database's timelines are: columns, partition key and bounds, every index, owners, privileges.
DESCRIBE = """
SELECT c.relname, c.relkind::text, pg_get_userbyid(c.relowner)::text, c.relacl::text,
       pg_get_partkeydef(c.oid), pg_get_expr(c.relpartbound, c.oid),
       (SELECT array_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod) || ' ' || a.attnotnull
                         || coalesce(' ' || a.attacl::text, '') ORDER BY a.attnum)
        FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped)::text,
       (SELECT array_agg(pg_get_indexdef(i.indexrelid) ORDER BY 1) FROM pg_index i WHERE i.indrelid = c.oid)::text,
       (SELECT array_agg(pg_get_constraintdef(k.oid) ORDER BY 1) FROM pg_constraint k WHERE k.conrelid = c.oid)::text
FROM pg_class c
WHERE c.oid = 'timelines'::regclass
   OR c.oid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = 'timelines'::regclass)
ORDER BY c.relname
"""


@pytest.fixture
def names(infra: Infra) -> Iterator[dict[str, str]]:
    made = {"old": unique("walfeed_m"), "fresh": unique("walfeed_m"), "owner": unique("wfm"),
            "reader": unique("wfm"), "writer": unique("wfm")}
    with psycopg.connect(infra.pg_admin_url, autocommit=True) as admin:
        for role in ("owner", "reader", "writer"):
            admin.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(sql.Identifier(made[role])))
        for db in ("old", "fresh"):
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(made[db])))
    try:
        yield made
    finally:
        for db in ("old", "fresh"):
            drop_database(infra, made[db])  # before the roles: the owner owns things in them
        with psycopg.connect(infra.pg_admin_url, autocommit=True) as admin:
            for role in ("owner", "reader", "writer"):
                admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(made[role])))


def grant(conn: psycopg.Connection[tuple[object, ...]], names: dict[str, str]) -> None:
    reader, writer = (sql.Identifier(names[r]) for r in ("reader", "writer"))
    conn.execute(sql.SQL("GRANT SELECT ON timelines TO {}").format(reader))
    conn.execute(sql.SQL("GRANT SELECT, INSERT, DELETE ON timelines TO {}").format(writer))
    conn.execute(sql.SQL("GRANT UPDATE (author_id) ON timelines TO {} WITH GRANT OPTION").format(writer))


def test_existing_timelines_move_with_rows_owner_and_grants_and_match_a_fresh_schema(
        infra: Infra, names: dict[str, str]) -> None:
    old, fresh = infra.db_url(names["old"]), infra.db_url(names["fresh"])
    migrated.before(old, MIGRATION)
    with psycopg.connect(old, autocommit=True) as conn:
        conn.execute(ROWS)
        conn.execute(sql.SQL("ALTER TABLE timelines OWNER TO {}").format(sql.Identifier(names["owner"])))
        grant(conn, names)
        rows = conn.execute("SELECT user_id, post_id, author_id FROM timelines ORDER BY 1, 2").fetchall()
        acl = conn.execute("SELECT relacl::text FROM pg_class WHERE oid = 'timelines'::regclass").fetchone()
    with psycopg.connect(old, autocommit=True) as before:
        before.execute("PREPARE page (bigint) AS SELECT count(*) FROM timelines WHERE user_id = $1")
        assert before.execute("EXECUTE page (7)").fetchone() is not None

        assert apply_schema(old) == [path.name for path in migration_files() if path.name >= MIGRATION]

        count = before.execute("EXECUTE page (7)").fetchone()  # re-planned against the new table
    assert len(rows) == 15000
    with psycopg.connect(old, autocommit=True) as conn:
        assert conn.execute("SELECT user_id, post_id, author_id FROM timelines ORDER BY 1, 2").fetchall() == rows
        assert count == (sum(1 for r in rows if r[0] == 7),)
        assert conn.execute("SELECT relkind::text, relacl::text FROM pg_class WHERE oid = 'timelines'::regclass"
                            ).fetchone() == ("p", acl[0] if acl else None)
        owners = conn.execute("SELECT DISTINCT pg_get_userbyid(c.relowner)::text FROM pg_inherits i "
                              "JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'timelines'::regclass"
                              ).fetchall()
        assert owners == [(names["owner"],)]
        described = conn.execute(DESCRIBE).fetchall()

        conn.execute((migration_files()[-1].parent / MIGRATION).read_text())  # again: nothing to do
        assert conn.execute(DESCRIBE).fetchall() == described
        reader = sql.Identifier(names["reader"])
        with conn.transaction(force_rollback=True):
            conn.execute(sql.SQL("SET LOCAL ROLE {}").format(reader))
            assert conn.execute("SELECT count(*) FROM timelines").fetchone() == (15000,)
        with conn.transaction(force_rollback=True), pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(sql.SQL("SET LOCAL ROLE {}").format(reader))
            conn.execute("SELECT count(*) FROM timelines_p00")  # partitions only through timelines

    with psycopg.connect(infra.pg_admin_url, autocommit=True) as admin:
        admin.execute(sql.SQL("ALTER DATABASE {} OWNER TO {}").format(sql.Identifier(names["fresh"]),
                                                                      sql.Identifier(names["owner"])))
    apply_schema(fresh, role=names["owner"])  # as `walfeed bootstrap-roles` migrates
    with psycopg.connect(fresh, autocommit=True) as conn:
        grant(conn, names)
        assert conn.execute(DESCRIBE).fetchall() == described
