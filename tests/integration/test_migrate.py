"""`walfeed migrate` on a real server: schema and slot, twice without harm."""

import psycopg
import pytest

from testkit.infra import Infra
from testkit.processes import Processes
from testkit.resources import drop_database, unique

pytestmark = pytest.mark.integration


def test_migrate_creates_database_schema_and_slot_and_is_idempotent(infra: Infra, processes: Processes) -> None:
    name, slot = unique("walfeed_m"), unique("m")
    env = {"WALFEED_DATABASE_URL": infra.db_url(name), "WALFEED_SLOT": slot}
    try:
        for _ in range(2):
            proc = processes.start("migrate", "migrate", env=env)
            assert proc.wait(timeout=60) == 0, proc.log()
        with psycopg.connect(infra.db_url(name)) as conn:
            tables = {r[0] for r in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public'").fetchall()}
            assert {"users", "follows", "posts", "timelines", "outbox"} <= tables
            plugin = conn.execute("SELECT plugin FROM pg_replication_slots WHERE slot_name = %s", (slot,)).fetchone()
            assert plugin == ("wal2json",)
        assert "slot " + slot + ": exists" in proc.log()
    finally:
        drop_database(infra, name)


def test_bad_setting_stops_at_start_naming_the_variable(processes: Processes) -> None:
    proc = processes.start("bad", "migrate", env={"WALFEED_CELEBRITY_THRESHOLD": "lots"})
    assert proc.wait(timeout=30) == 2
    assert "WALFEED_CELEBRITY_THRESHOLD" in proc.log()


def test_no_slot_applies_the_schema_only(infra: Infra, processes: Processes) -> None:
    name, slot = unique("walfeed_m"), unique("m")
    env = {"WALFEED_DATABASE_URL": infra.db_url(name), "WALFEED_SLOT": slot}
    try:
        proc = processes.start("migrate", "migrate", "--no-slot", env=env)
        assert proc.wait(timeout=60) == 0, proc.log()
        with psycopg.connect(infra.db_url(name)) as conn:
            assert conn.execute("SELECT to_regclass('outbox')").fetchone() == ("outbox",)
            assert conn.execute("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", (slot,)).fetchone() is None
    finally:
        drop_database(infra, name)
