"""`walfeed prune-outbox` against a real database and slot: a row goes only once the slot's confirmed position
passed a watermark above its transaction at least --older-than ago (CDC), or once published that long ago (poll);
a processed record once its outbox row is gone (docs/adr/0071). The slot is moved here as a relay's confirms
move it (pg_replication_slot_advance); tests/integration/relay/test_relay_prune.py runs the relay's timer."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
import pytest

from services.core import retention
from testkit.waiting import eventually
from tests.integration.ops.conftest import Walfeed
from tests.integration.relay.conftest import write_events

pytestmark = pytest.mark.integration


def _confirm_all(database_url: str, slot: str) -> None:
    """What a relay does once the broker confirmed everything: the slot's confirmed position moves to the end."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("SELECT pg_replication_slot_advance(%s, pg_current_wal_lsn())", (slot,))


def _ids(database_url: str, table: str = "outbox", column: str = "id") -> set[str]:
    with psycopg.connect(database_url, autocommit=True) as conn:
        return {str(r[0]) for r in conn.execute(f"SELECT {column} FROM {table}")}


def _prune_when_confirmed(database_url: str, slot: str) -> set[str]:
    """Confirm everything, then prune: the rows behind a watermark the slot passed go; returns the rows left. A
    transaction open anywhere in the cluster holds every watermark's xmin back (as it holds back vacuum), so tests
    retry this."""
    _confirm_all(database_url, slot)
    with retention.connect(database_url) as conn:
        retention.prune(conn, slot, timedelta(0))
    return _ids(database_url)


def test_only_rows_behind_the_slots_confirmed_position_go(walfeed: Walfeed, database_url: str,
                                                            slot_name: str) -> None:
    early = set(write_events(database_url, 5))
    waiting = walfeed("prune-outbox", "--older-than", "0", "--wait", "0.5")
    assert waiting.returncode == 0, waiting.stderr
    assert "0 rows confirmed through the slot" in waiting.stdout and "has not confirmed" in waiting.stdout
    assert _ids(database_url) == early  # the slot has not moved: nothing is known to be published

    # A transaction writes its row, and stays open while the slot confirms everything up to the end of the WAL.
    with psycopg.connect(database_url) as late_conn:
        row = late_conn.execute("INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES "
                                "(gen_random_uuid(), 'post', '9', 'post.created', '{}') RETURNING id").fetchone()
        assert row is not None
        late = str(row[0])
        eventually(lambda: _prune_when_confirmed(database_url, slot_name) == set(),  # the late row: not visible yet
                   timeout=60, what="the rows committed before the confirmed position pruned")
        late_conn.commit()
    # Its commit is after every position the slot confirmed so far: whatever was recorded, the row stays.
    done = walfeed("prune-outbox", "--older-than", "0", "--wait", "0")
    assert done.returncode == 0, done.stderr
    assert _ids(database_url) == {late}

    eventually(lambda: _prune_when_confirmed(database_url, slot_name) == set(), timeout=60,
               what="the late row pruned once the slot confirmed past its commit")


def _ended_everywhere(database_url: str, xid: int) -> bool:
    """Whether every transaction up to `xid` has ended in the whole cluster (other databases' included)."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        row = conn.execute("SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint > %s", (xid,)).fetchone()
    return bool(row and row[0])


def test_the_duration_counts_from_the_slots_confirm_not_from_the_row(walfeed: Walfeed, database_url: str,
                                                                       slot_name: str) -> None:
    with psycopg.connect(database_url) as conn:  # rows written two days ago, confirmed only now
        conn.execute("INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, created_at) "
                     "SELECT gen_random_uuid(), 'post', '1', 'post.created', '{}', now() - interval '2 days' "
                     "FROM generate_series(1, 3)")
        row = conn.execute("SELECT pg_current_xact_id()::text::bigint").fetchone()
        assert row is not None
        xid = int(row[0])
    eventually(lambda: _ended_everywhere(database_url, xid), timeout=60, what="older transactions ended")
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("SELECT walfeed_outbox_watermark(%s, true)", (slot_name,))
    _confirm_all(database_url, slot_name)
    kept = walfeed("prune-outbox", "--older-than", "1h", "--wait", "0")
    assert kept.returncode == 0 and "0 rows confirmed" in kept.stdout, kept.stdout + kept.stderr
    assert len(_ids(database_url)) == 3  # their messages may still sit in a queue: the worker needs the rows
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("UPDATE outbox_watermarks SET passed_at = now() - interval '2 hours' "
                     "WHERE passed_at IS NOT NULL")
    gone = walfeed("prune-outbox", "--older-than", "1h", "--wait", "0")
    assert "3 rows confirmed" in gone.stdout, gone.stdout + gone.stderr
    assert _ids(database_url) == set()


def test_rows_of_the_polling_source_go_once_published_that_long_ago(database_url: str, slot_name: str) -> None:
    old, recent, unpublished = (set(write_events(database_url, 4)), set(write_events(database_url, 2)),
                                set(write_events(database_url, 2)))
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("UPDATE outbox SET published_at = now() - interval '2 hours' WHERE id = ANY(%s::uuid[])",
                     (list(old),))
        conn.execute("UPDATE outbox SET published_at = now() WHERE id = ANY(%s::uuid[])", (list(recent),))
        conn.execute("SELECT pg_drop_replication_slot(%s)", (slot_name,))  # a database of the polling source
    with retention.connect(database_url) as conn:
        pruned = retention.prune(conn, slot_name, timedelta(hours=1), batch=3)  # two batches and a short one
    assert (pruned.confirmed, pruned.published) == (0, 4)
    assert pruned.note is not None and "no replication slot" in pruned.note
    assert _ids(database_url) == recent | unpublished


def test_processed_records_go_once_their_outbox_row_is_gone_and_they_are_old(database_url: str,
                                                                              slot_name: str) -> None:
    kept_row = write_events(database_url, 1)[0]
    with psycopg.connect(database_url, autocommit=True) as conn:
        def record(event_id: Any, age: str) -> str:
            row = conn.execute("INSERT INTO processed_events (consumer, event_id, processed_at) "
                               "VALUES ('fanout', coalesce(%s::uuid, gen_random_uuid()), now() - %s::interval) "
                               "RETURNING event_id", (event_id, age)).fetchone()
            assert row is not None
            return str(row[0])

        with_row = record(kept_row, "2 hours")
        old = [record(None, "2 hours") for _ in range(5)]
        recent = record(None, "1 minute")
    with retention.connect(database_url) as rconn:
        pruned = retention.prune(rconn, slot_name, timedelta(hours=1), batch=2)
    assert pruned.processed == len(old)
    assert _ids(database_url, "processed_events", "event_id") == {with_row, recent}


def test_status_shows_the_outbox_and_processed_records(walfeed: Walfeed, database_url: str) -> None:
    write_events(database_url, 3)
    done = walfeed("status")
    assert "TABLES" in done.stdout and "outbox" in done.stdout and "processed_events" in done.stdout, done.stdout
