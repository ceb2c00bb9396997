"""`walfeed migrate`: apply db/init/*.sql once each, then make sure the logical replication slot exists.

The slot is created here, not by the relay, because a slot only retains WAL from the moment it exists:
events written before the relay first starts would otherwise be lost.
"""

from __future__ import annotations

import logging
from pathlib import Path

import psycopg

from services.core import slots

log = logging.getLogger(__name__)

_MIGRATIONS_TABLE = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    name       text PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
)
"""
# Serializes concurrent `walfeed migrate` runs on one database.
_LOCK = "SELECT pg_advisory_xact_lock(hashtext('walfeed.migrate'))"


class MigrationError(Exception):
    pass


def migration_files() -> list[Path]:
    """db/init/*.sql of the source tree, in name order (walfeed is installed editable, or the tree copied whole)."""
    root = Path(__file__).resolve().parents[2] / "db" / "init"
    if not root.is_dir():
        raise MigrationError(f"{root} not found: walfeed runs from its source tree (pip install -e .)")
    return sorted(root.glob("*.sql"))


def apply_schema(url: str, role: str | None = None) -> list[str]:
    """Apply every migration not applied yet, each in its own transaction. Returns the names applied.
    With `role`, as that role (SET ROLE): the objects created are its own (the owner role, docs/adr/0060)."""
    applied: list[str] = []
    with psycopg.connect(url) as conn:
        if role is not None:
            conn.execute(psycopg.sql.SQL("SET ROLE {}").format(psycopg.sql.Identifier(role)))
        conn.execute(_LOCK)  # before the table too: two first runs at once would both create it
        conn.execute(_MIGRATIONS_TABLE)
        conn.commit()
        for path in migration_files():
            with conn.transaction():
                conn.execute(_LOCK)
                done = conn.execute("SELECT 1 FROM schema_migrations WHERE name = %s", (path.name,)).fetchone()
                if done:
                    continue
                log.info("applying migration", extra={"migration": path.name})
                conn.execute(path.read_text())  # trusted file from the repo
                conn.execute("INSERT INTO schema_migrations (name) VALUES (%s)", (path.name,))
                applied.append(path.name)
    return applied


def ensure_slot(url: str, slot: str) -> bool:
    """Create the wal2json logical slot if it does not exist. Returns True when it was created."""
    with psycopg.connect(url, autocommit=True) as conn:
        found = slots.find(conn.cursor(), slot)
        dbname = conn.info.dbname
        if found is not None:
            if found.plugin != slots.OUTPUT_PLUGIN or found.database != dbname:
                raise MigrationError(
                    f"replication slot {slot!r} exists for plugin {found.plugin!r} in database {found.database!r}; "
                    f"walfeed needs a {slots.OUTPUT_PLUGIN} slot in {dbname!r}: set WALFEED_SLOT to another name"
                )
            return False
        try:
            conn.execute(slots.CREATE, (slot, slots.OUTPUT_PLUGIN))
        except psycopg.errors.DuplicateObject:
            return False  # created concurrently by another migrate
        except psycopg.errors.ObjectNotInPrerequisiteState as exc:
            raise MigrationError(
                f"cannot create logical slot {slot!r}: {exc}. Run scripts/setup-infra.sh "
                "(wal_level must be 'logical')"
            ) from None
        except psycopg.errors.UndefinedFile as exc:
            raise MigrationError(
                f"cannot create slot {slot!r}: the wal2json plugin is not installed ({exc}). "
                "Run scripts/setup-infra.sh"
            ) from None
        log.info("created replication slot", extra={"slot": slot})
        return True


def ensure_database(url: str) -> bool:
    """Create the database named in `url` if it does not exist (connecting to `postgres` for that)."""
    info = psycopg.conninfo.conninfo_to_dict(url)
    dbname = info.get("dbname") or info.get("user")
    try:
        psycopg.connect(url).close()
        return False
    except psycopg.OperationalError as exc:
        if "does not exist" not in str(exc) or not dbname:
            raise
    admin = psycopg.conninfo.make_conninfo(url, dbname="postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        try:
            conn.execute(psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(str(dbname))))
        except psycopg.errors.DuplicateDatabase:
            return False
    log.info("created database", extra={"database": dbname})
    return True


def migrate(url: str, slot: str) -> None:
    ensure_database(url)
    apply_schema(url)
    ensure_slot(url, slot)
