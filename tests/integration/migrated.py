"""A database as `walfeed migrate` left it before a given migration existed: for the tests of a migration that
changes data already there (tests/integration/test_migrate_*.py)."""

from __future__ import annotations

import psycopg

from services.core.migrate import migration_files


def before(url: str, migration: str) -> None:
    """Apply and record every migration named before `migration`, as `walfeed migrate` did when it was the newest."""
    with psycopg.connect(url) as conn:
        conn.execute("CREATE TABLE schema_migrations (name text PRIMARY KEY, applied_at timestamptz NOT NULL "
                     "DEFAULT now())")
        for path in migration_files():
            if path.name < migration:
                conn.execute(path.read_text())  # trusted file from the repo
                conn.execute("INSERT INTO schema_migrations (name) VALUES (%s)", (path.name,))
