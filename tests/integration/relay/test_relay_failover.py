"""The relay's failover checkpoint and recovery on the machine's own Postgres (docs/adr/0091): the checkpoint follows
the confirmed position; a missing slot is created again and the rows the checkpoint does not cover are republished
before streaming; a slot of another timeline's history is republished from the checkpoint. The promotion of a real
streaming standby is tests/e2e/test_pg_failover.py."""

from __future__ import annotations

import signal
from collections import Counter

import psycopg
import pytest

from testkit.waiting import eventually
from tests.integration.relay.conftest import (
    StartRelay,
    Watcher,
    assert_published_as_spec,
    checkpoint,
    current_lsn,
    write_events,
)

pytestmark = pytest.mark.integration

FAST = {"WALFEED_RELAY_CHECKPOINT_INTERVAL": "0.2"}


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
    # and to walfeed's own consumers, who read fan-out events from the grouped exchange only (ADR 0115)
    eventually(lambda: watcher.has_all_grouped(lost_without_recovery), timeout=30,
               what="the events the slot never saw, on the grouped exchange")
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
    grouped = Counter(watcher.grouped_event_ids())
    assert {grouped[event_id] for event_id in lost_without_recovery} == {1}
    sysid, timeline, _next = server(database_url)
    found = checkpoint(database_url, slot_name)
    assert found is not None and (found["system_identifier"], found["timeline"]) == (sysid, timeline)
    assert relay.stop(signal.SIGTERM) == 0


def _published_and_checkpointed(database_url: str, slot_name: str, watcher: Watcher,
                                start_relay: StartRelay) -> set[str]:
    """Events published and covered by a checkpoint, the relay stopped; returns their ids."""
    relay = start_relay(**FAST)
    before = set(write_events(database_url, 100))
    _sysid, _timeline, next_xid = server(database_url)
    eventually(lambda: watcher.has_all(before), timeout=30, what="the first events published")
    eventually(lambda: covered(database_url, slot_name, next_xid), timeout=30, what="a checkpoint past them")
    assert relay.stop(signal.SIGTERM) == 0
    return before


def test_a_slot_with_a_checkpoint_of_another_timeline_is_republished_from_the_checkpoint(
        database_url: str, slot_name: str, watcher: Watcher, start_relay: StartRelay) -> None:
    before = _published_and_checkpointed(database_url, slot_name, watcher, start_relay)
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


def _lose_the_slot_after_a_checkpoint(database_url: str, slot_name: str, watcher: Watcher,
                                      start_relay: StartRelay) -> None:
    """Then the slot dropped with no relay running: what a promoted standby (or a slot dropped by hand) looks like
    to the next relay."""
    _published_and_checkpointed(database_url, slot_name, watcher, start_relay)
    drop_slot(database_url, slot_name)


def test_a_relay_killed_while_it_republishes_leaves_the_rest_to_the_next_one(
        database_url: str, slot_name: str, watcher: Watcher, start_relay: StartRelay) -> None:
    _lose_the_slot_after_a_checkpoint(database_url, slot_name, watcher, start_relay)
    uncovered = set(write_events(database_url, 20_000, per_txn=100))
    # A small window: the republish goes 20 rows at a time, each batch confirmed, so it is killed in the middle.
    relay = start_relay("relay2", WALFEED_RELAY_WINDOW="20", **FAST)
    eventually(lambda: "republished" in relay.log() and "created replication slot" in relay.log(), timeout=60,
               what="the republish under way, on the slot it created")
    relay.kill()
    assert "recovered on a new primary" not in relay.log(), "killed too late: the republish had finished"
    watcher.pump()
    assert not uncovered <= set(watcher.ids()), "killed too late: every row was republished"
    # The slot exists now and the checkpoint matches this server: without the recovery's own mark, the next relay
    # streamed from the slot's start and the rows not republished yet were never published.
    later = set(write_events(database_url, 100))
    relay = start_relay("relay3", **FAST)
    eventually(lambda: watcher.has_all(uncovered | later), timeout=120, what="every row, republished or streamed")
    assert "action=republish" in relay.log()
    after = set(write_events(database_url, 100))
    next_xid = server(database_url)[2]
    eventually(lambda: watcher.has_all(after), timeout=30, what="streaming after the recovery")
    eventually(lambda: covered(database_url, slot_name, next_xid), timeout=30,
               what="the checkpoint moving again after the recovery")
    assert relay.stop(signal.SIGTERM) == 0


def test_two_relays_recovering_at_once_republish_once(
        database_url: str, slot_name: str, watcher: Watcher, start_relay: StartRelay) -> None:
    _lose_the_slot_after_a_checkpoint(database_url, slot_name, watcher, start_relay)
    uncovered = set(write_events(database_url, 3_000, per_txn=50))
    mark = len(watcher.messages)
    relays = [start_relay(f"relay{i}", WALFEED_RELAY_WINDOW="50", **FAST) for i in (2, 3)]
    eventually(lambda: watcher.has_all(uncovered), timeout=120, what="the rows the slot never saw")
    later = set(write_events(database_url, 100))
    eventually(lambda: watcher.has_all(later), timeout=60, what="streaming again")
    recovered = [r for r in relays if "recovered on a new primary" in r.log()]
    assert len(recovered) == 1, [r.log()[-2000:] for r in relays]  # the other waited (the advisory lock) or streamed
    counts = Counter(watcher.ids()[mark:])
    assert set(counts) == uncovered | later and max(counts.values()) == 1
    for relay in relays:
        assert relay.stop(signal.SIGTERM) == 0
