"""The relay's failover checkpoint and recovery on the machine's own Postgres (docs/adr/0091): the checkpoint follows
the confirmed position; a missing slot is created again and the rows the checkpoint does not cover are republished
before streaming; a slot of another timeline's history is republished from the checkpoint. The promotion of a real
streaming standby is tests/e2e/test_pg_failover.py."""

from __future__ import annotations

import signal
from collections import Counter
from typing import Any

import psycopg
import pytest

from testkit.waiting import eventually
from tests.integration.relay.conftest import StartRelay, Watcher, assert_published_as_spec, current_lsn, write_events

pytestmark = pytest.mark.integration

FAST = {"WALFEED_RELAY_CHECKPOINT_INTERVAL": "0.2"}


def checkpoint(database_url: str, slot: str) -> dict[str, Any] | None:
    with psycopg.connect(database_url, autocommit=True, row_factory=psycopg.rows.dict_row) as conn:
        return conn.execute("SELECT system_identifier, timeline, snapshot_xmin::text::bigint AS xmin,"
                            " pg_wal_lsn_diff(lsn, '0/0')::bigint AS lsn FROM relay_checkpoints WHERE slot = %s",
                            (slot,)).fetchone()


def server(database_url: str) -> tuple[int, int, int]:
    """(system identifier, timeline, next transaction id) of the server."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        row = conn.execute("SELECT (pg_control_system()).system_identifier, walfeed_timeline(),"
                           " pg_snapshot_xmax(pg_current_snapshot())::text::bigint").fetchone()
    assert row is not None
    return int(row[0]), int(row[1]), int(row[2])


def covered(database_url: str, slot: str, xid: int) -> bool:
    """The checkpoint covers every transaction below `xid`."""
    found = checkpoint(database_url, slot)
    return found is not None and found["xmin"] is not None and found["xmin"] >= xid


def test_the_checkpoint_follows_the_confirmed_position(database_url: str, slot_name: str, watcher: Watcher,
                                                       start_relay: StartRelay) -> None:
    relay = start_relay(**FAST)
    ids = set(write_events(database_url, 200, per_txn=4))
    _sysid, _timeline, next_xid = server(database_url)
    written_at = current_lsn(database_url)
    eventually(lambda: watcher.has_all(ids), timeout=30, what="every event published")
    eventually(lambda: covered(database_url, slot_name, next_xid), timeout=30, what="a checkpoint past the writes")
    found = checkpoint(database_url, slot_name)
    assert found is not None
    sysid, timeline, _next = server(database_url)
    assert (found["system_identifier"], found["timeline"]) == (sysid, timeline)
    assert found["lsn"] >= written_at
    assert relay.stop(signal.SIGTERM) == 0


def drop_slot(database_url: str, slot: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))


def test_a_missing_slot_is_created_and_uncovered_rows_republished_first(
        database_url: str, slot_name: str, watcher: Watcher, start_relay: StartRelay) -> None:
    relay = start_relay(**FAST)
    before = set(write_events(database_url, 300, per_txn=3))
    _sysid, _timeline, next_xid = server(database_url)
    eventually(lambda: watcher.has_all(before), timeout=30, what="the first events published")
    eventually(lambda: covered(database_url, slot_name, next_xid), timeout=30, what="a checkpoint past them")
    assert relay.stop(signal.SIGTERM) == 0
    drop_slot(database_url, slot_name)  # what a promoted standby looks like to the relay: no slot
    lost_without_recovery = set(write_events(database_url, 300, per_txn=3))
    mark = len(watcher.messages)
    relay = start_relay("relay2", **FAST)
    eventually(lambda: watcher.has_all(lost_without_recovery), timeout=60, what="the events the slot never saw")
    log = relay.log()
    assert "new primary" in log and "recovered on a new primary" in log
    assert log.index("recovered on a new primary") < log.index("streaming")
    after = set(write_events(database_url, 100))
    eventually(lambda: watcher.has_all(after), timeout=30, what="streaming again")
    counts = Counter(watcher.ids()[mark:])
    assert set(counts) == lost_without_recovery | after  # covered rows are not sent again
    first_of_a_txn = next(m.properties.message_id for m in watcher.messages[mark:]
                          if m.properties.message_id in lost_without_recovery and b'"aggregate_id":"1"' in m.body)
    assert_published_as_spec(watcher, first_of_a_txn)  # a republished event is the message the slot would send
    assert max(counts.values()) == 1  # the slot's exported snapshot: nothing both republished and streamed
    sysid, timeline, _next = server(database_url)
    found = checkpoint(database_url, slot_name)
    assert found is not None and (found["system_identifier"], found["timeline"]) == (sysid, timeline)
    assert relay.stop(signal.SIGTERM) == 0


def test_a_slot_with_a_checkpoint_of_another_timeline_is_republished_from_the_checkpoint(
        database_url: str, slot_name: str, watcher: Watcher, start_relay: StartRelay) -> None:
    relay = start_relay(**FAST)
    before = set(write_events(database_url, 100))
    _sysid, _timeline, next_xid = server(database_url)
    eventually(lambda: watcher.has_all(before), timeout=30, what="the first events published")
    eventually(lambda: covered(database_url, slot_name, next_xid), timeout=30, what="a checkpoint past them")
    assert relay.stop(signal.SIGTERM) == 0
    # As if the checkpoint came from the old primary and `walfeed migrate` created this slot after the promotion.
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("UPDATE relay_checkpoints SET timeline = timeline + 1 WHERE slot = %s", (slot_name,))
    later = set(write_events(database_url, 100))
    mark = len(watcher.messages)
    relay = start_relay("relay2", **FAST)
    eventually(lambda: watcher.has_all(later), timeout=60, what="the events after the checkpoint")
    counts = Counter(watcher.ids()[mark:])
    assert not set(counts) & before  # covered by the checkpoint
    assert "action=republish" in relay.log()
    sysid, timeline, _next = server(database_url)
    found = checkpoint(database_url, slot_name)
    assert found is not None and (found["system_identifier"], found["timeline"]) == (sysid, timeline)
    assert relay.stop(signal.SIGTERM) == 0
