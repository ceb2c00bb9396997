"""The private primary + standby harness (testkit/pgcluster.py) does what the replica and failover tests rely on:
a migrated database with its wal2json slot on the primary, replay onto a hot standby, promotion, a crash."""

from __future__ import annotations

import psycopg
import pytest

from testkit.pgcluster import PgCluster, dbname

pytestmark = pytest.mark.integration


def _add_user(url: str, handle: str) -> None:
    with psycopg.connect(url) as conn:
        conn.execute("INSERT INTO users (handle, token_hash) VALUES (%s, sha256(%s::bytea))", (handle, handle))


def _handles(url: str) -> set[str]:
    with psycopg.connect(url) as conn:
        return {h for (h,) in conn.execute("SELECT handle FROM users").fetchall()}


def test_a_write_on_the_primary_is_read_on_the_standby_once_replayed(pg_cluster: PgCluster) -> None:
    url = pg_cluster.migrated_database("harness_slot")
    name = dbname(url)
    standby = pg_cluster.standbys[0]
    with psycopg.connect(url) as conn:  # walfeed migrate's work: schema and the wal2json slot
        assert conn.execute("SELECT plugin FROM pg_replication_slots WHERE slot_name = 'harness_slot'"
                            ).fetchone() == ("wal2json",)
    _add_user(url, "alice")
    pg_cluster.wait_replayed(standby, pg_cluster.current_lsn(pg_cluster.primary))
    assert "alice" in _handles(standby.url(name))
    assert pg_cluster.in_recovery(standby)
    with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
        _add_user(standby.url(name), "mallory")


def test_after_a_crash_and_promotion_the_standby_takes_writes(fresh_pg_cluster: PgCluster) -> None:
    cluster = fresh_pg_cluster
    url = cluster.migrated_database()
    name = dbname(url)
    old, standby = cluster.primary, cluster.standbys[0]
    _add_user(url, "before")
    cluster.wait_replayed(standby, cluster.current_lsn(old))
    cluster.stop(old, "immediate")
    cluster.promote(standby)
    _add_user(standby.url(name), "after")
    assert _handles(standby.url(name)) == {"before", "after"}
