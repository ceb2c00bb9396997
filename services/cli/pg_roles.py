"""Postgres side of `walfeed bootstrap-roles`: the roles (cluster-wide), then in one database its ownership and
the grants of db/roles/grants.sql. Needs a superuser connection (PostgreSQL 15 lets only a superuser create a
REPLICATION role). Idempotent and safe to run concurrently: role changes serialize on an advisory lock in the
maintenance database, database changes on one in the database itself.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Final

import psycopg
from psycopg import sql

from services.cli.roles import PROCESSES, STATEMENT_TIMEOUTS, Roles

log = logging.getLogger(__name__)

GRANTS_FILE: Final = Path(__file__).resolve().parents[2] / "db" / "roles" / "grants.sql"

LOCK: Final = "SELECT pg_advisory_xact_lock(hashtext('walfeed.bootstrap-roles'))"
ROLE_EXISTS: Final = "SELECT 1 FROM pg_roles WHERE rolname = %s"
CREATE_ROLE: Final = sql.SQL("CREATE ROLE {} NOLOGIN")
# Every attribute stated, so a role that exists with more rights (an older set-up, a manual change) loses them.
ALTER_OWNER: Final = sql.SQL(
    "ALTER ROLE {} NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE INHERIT NOREPLICATION NOBYPASSRLS PASSWORD NULL")
ALTER_LOGIN: Final = sql.SQL(
    "ALTER ROLE {} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT {} NOBYPASSRLS PASSWORD {}")
SET_TIMEOUT: Final = sql.SQL("ALTER ROLE {} SET statement_timeout = {}")

DATABASE_OWNER: Final = sql.SQL("ALTER DATABASE {} OWNER TO {}")
FOREIGN_TABLES: Final = """
SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p', 'v', 'm', 'S') AND pg_get_userbyid(c.relowner) <> %s
  AND (c.relispartition OR NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.objid = c.oid AND d.deptype IN ('a', 'i')))
"""  # tables, views and sequences no table owns, and partitions (ALTER TABLE ... OWNER TO does not recurse to them)
TABLE_OWNER: Final = sql.SQL("ALTER TABLE {} OWNER TO {}")
# The api reads the reader's partition of timelines by name (docs/adr/0153): SELECT on each partition as on the
# parent (grants.sql). A partition made later (a split, docs/database.md) gets it at the next bootstrap-roles; until
# then the api reads that partition's readers through the parent.
TIMELINE_PARTITIONS: Final = """
SELECT n.nspname, c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
JOIN pg_namespace n ON n.oid = c.relnamespace WHERE i.inhparent = to_regclass('timelines')
"""
GRANT_READ: Final = sql.SQL("GRANT SELECT ON {} TO {}")
MEMBER_OF: Final = ("SELECT r.rolname FROM pg_auth_members m JOIN pg_roles r ON r.oid = m.roleid "
                    "WHERE m.member = (SELECT oid FROM pg_roles WHERE rolname = %s) ORDER BY 1")
REVOKE_MEMBERSHIP: Final = sql.SQL("REVOKE {} FROM {}")


def ensure_roles(admin_url: str, roles: Roles, passwords: Mapping[str, str]) -> list[str]:
    """Create the owner and the login roles if missing and set every attribute, password and statement_timeout.
    Returns the roles created. Roles live in the cluster: this connects to the maintenance database `postgres`, so
    that the advisory lock serializes every bootstrap of the cluster, whichever database it is for."""
    created = []
    maintenance = psycopg.conninfo.make_conninfo(admin_url, dbname="postgres")
    with psycopg.connect(maintenance, autocommit=True) as conn, conn.transaction():
        conn.execute(LOCK)
        for role in (roles.owner, *(roles.login(p) for p in PROCESSES)):
            if conn.execute(ROLE_EXISTS, (role,)).fetchone() is None:
                conn.execute(CREATE_ROLE.format(sql.Identifier(role)))
                created.append(role)
        conn.execute(ALTER_OWNER.format(sql.Identifier(roles.owner)))
        for process in PROCESSES:
            role = roles.login(process)
            replication = sql.SQL("REPLICATION" if process == "relay" else "NOREPLICATION")
            conn.execute(ALTER_LOGIN.format(sql.Identifier(role), replication,
                                            sql.Literal(_verifier(conn, role, passwords[process]))))
            conn.execute(SET_TIMEOUT.format(sql.Identifier(role), sql.Literal(STATEMENT_TIMEOUTS[process])))
            # a login role is a member of no role: one granted by hand (the owner, pg_read_all_data...) is taken back
            for (granted,) in conn.execute(MEMBER_OF, (role,)).fetchall():
                conn.execute(REVOKE_MEMBERSHIP.format(sql.Identifier(granted), sql.Identifier(role)))
                log.warning("revoked a role membership granted by hand", extra={"role": role, "member_of": granted})
    for role in created:
        log.info("created role", extra={"role": role})
    return created


def _verifier(conn: psycopg.Connection[object], role: str, password: str) -> str:
    """The SCRAM verifier of the password, computed here by libpq: the statement (and a server log of it) never
    holds the password itself."""
    return conn.pgconn.encrypt_password(password.encode(), role.encode(), b"scram-sha-256").decode()


def take_ownership(database_url: str, roles: Roles) -> list[str]:
    """Give the database (and so its `public` schema) and its schema objects to the owner role, so that
    migrations run as the owner. Returns the objects whose owner changed (migrated before the roles existed)."""
    owner = sql.Identifier(roles.owner)
    with psycopg.connect(database_url, autocommit=True) as conn, conn.transaction():
        conn.execute(LOCK)
        conn.execute(DATABASE_OWNER.format(sql.Identifier(conn.info.dbname), owner))
        moved = [name for (name,) in conn.execute(FOREIGN_TABLES, (roles.owner,)).fetchall()]
        for name in moved:
            conn.execute(TABLE_OWNER.format(sql.Identifier(name), owner))
    return moved


def apply_grants(database_url: str, roles: Roles) -> None:
    """db/roles/grants.sql, after the migrations (it names their tables)."""
    with psycopg.connect(database_url, autocommit=True) as conn, conn.transaction():
        conn.execute(LOCK)
        conn.execute(grants(conn.info.dbname, roles))
        for schema, name in conn.execute(TIMELINE_PARTITIONS).fetchall():
            conn.execute(GRANT_READ.format(sql.Identifier(schema, name), sql.Identifier(roles.login("api"))))


def grants(dbname: str, roles: Roles) -> sql.Composed:
    """db/roles/grants.sql with its role and database names as quoted identifiers."""
    names = {p: sql.Identifier(roles.login(p)) for p in PROCESSES}
    return sql.SQL(GRANTS_FILE.read_text()).format(  # trusted file from the repo; names are identifiers
        database=sql.Identifier(dbname), owner=sql.Identifier(roles.owner), **names)
