"""A database as `walfeed migrate` left it before a given migration existed: for the tests of a migration that
changes data already there (tests/integration/test_migrate_*.py)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import psycopg
from psycopg import sql

from services.core.migrate import migration_files
from testkit.infra import Infra
from testkit.resources import drop_database, unique


@contextlib.contextmanager
def empty_database(infra: Infra) -> Iterator[str]:
    """A database of the test's own with nothing in it (no schema, no migration), dropped afterwards."""
    name = unique("walfeed_m")
    with psycopg.connect(infra.pg_admin_url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield infra.db_url(name)
    finally:
        drop_database(infra, name)


def before(url: str, migration: str) -> None:
    """Apply and record every migration named before `migration`, as `walfeed migrate` did when it was the newest."""
    with psycopg.connect(url) as conn:
        conn.execute("CREATE TABLE schema_migrations (name text PRIMARY KEY, applied_at timestamptz NOT NULL "
                     "DEFAULT now())")
        for path in migration_files():
            if path.name < migration:
                conn.execute(path.read_text())  # trusted file from the repo
                conn.execute("INSERT INTO schema_migrations (name) VALUES (%s)", (path.name,))
