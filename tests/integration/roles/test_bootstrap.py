"""`walfeed bootstrap-roles` converges: run again, or twice at once, it ends in the same roles and grants, and it
takes back rights a role was given by hand (ADR 0060)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest
from psycopg import sql

from services.cli import bootstrap
from services.cli.roles import RoleSettings
from services.core.settings import Settings
from testkit.infra import Infra
from tests.integration.roles.conftest import RoleEnv

pytestmark = pytest.mark.integration

_ACL = "SELECT relname, relacl::text FROM pg_class WHERE relnamespace = 'public'::regnamespace ORDER BY relname"


def test_bootstrap_twice_at_once_converges_and_revokes_what_was_added_by_hand(
        role_env: RoleEnv, infra: Infra, settings: Settings, role_settings: RoleSettings,
        database_url: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        before = conn.execute(_ACL).fetchall()
        api = sql.Identifier(role_settings.roles.login("api"))
        conn.execute(sql.SQL("GRANT DELETE ON timelines TO {}").format(api))
        conn.execute(sql.SQL("ALTER ROLE {} CREATEDB").format(api))
        conn.execute(sql.SQL("GRANT {} TO {}").format(sql.Identifier(role_settings.roles.owner), api))
        conn.execute(sql.SQL("GRANT pg_read_all_data TO {}").format(api))

    with ThreadPoolExecutor(2) as pool:
        for done in [pool.submit(bootstrap.bootstrap, settings, role_settings, slot=False) for _ in range(2)]:
            done.result()

    with psycopg.connect(database_url, autocommit=True) as conn:
        assert conn.execute(_ACL).fetchall() == before
        row = conn.execute("SELECT rolcreatedb FROM pg_roles WHERE rolname = %s",
                           (role_settings.roles.login("api"),)).fetchone()
    assert row == (False,)
    with psycopg.connect(database_url, autocommit=True) as conn:  # no membership left: no SET ROLE owner
        assert conn.execute("SELECT count(*) FROM pg_auth_members m JOIN pg_roles r ON r.oid = m.member "
                            "WHERE r.rolname = %s", (role_settings.roles.login("api"),)).fetchone() == (0,)
    with psycopg.connect(role_env("api")["WALFEED_DATABASE_URL"], autocommit=True) as conn, \
            pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute("DELETE FROM timelines")


def test_the_api_may_read_each_partition_of_timelines_and_nothing_more(
        role_env: RoleEnv, role_settings: RoleSettings, database_url: str) -> None:
    """The home read names the reader's partition (docs/adr/0153): SELECT on each, as on the parent; the worker,
    which writes through the parent, is given none."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        rights = conn.execute(
            "SELECT c.relname, has_table_privilege(%s, c.oid, 'SELECT'), "
            "has_table_privilege(%s, c.oid, 'INSERT, UPDATE, DELETE, TRUNCATE'), "
            "has_table_privilege(%s, c.oid, 'SELECT') "
            "FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'timelines'::regclass",
            (role_settings.roles.login("api"), role_settings.roles.login("api"),
             role_settings.roles.login("worker"))).fetchall()
    assert len(rights) == 32 and {r[1:] for r in rights} == {(True, False, False)}, rights
    with psycopg.connect(role_env("api")["WALFEED_DATABASE_URL"], autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM timelines_p00").fetchone() == (0,)
