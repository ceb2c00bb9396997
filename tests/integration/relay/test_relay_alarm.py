"""A broker resource alarm (blocked connection) while the relay streams. This trips the alarm on the SHARED
broker (every publisher on it is blocked meanwhile): run it alone, at the end:
    .venv/bin/python -m pytest -m chaos tests/integration/relay/test_relay_alarm.py
"""

from __future__ import annotations

import subprocess
from datetime import datetime

import psycopg
import pytest

from testkit.waiting import eventually
from tests.integration.relay.conftest import StartRelay, Watcher, current_lsn, slot_lsn, write_events

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

BLOCKED_TIMEOUT = 4  # seconds: short, so the test also sees the relay give up on a blocked connection


def watermark(value: str) -> None:
    subprocess.run(["rabbitmqctl", "set_vm_memory_high_watermark", value], check=True, capture_output=True,
                   timeout=60)


def reply_time(database_url: str, slot: str) -> datetime | None:
    """When the slot's walsender last heard a status update from the relay."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        row = conn.execute("SELECT r.reply_time FROM pg_replication_slots s JOIN pg_stat_replication r "
                           "ON r.pid = s.active_pid WHERE s.slot_name = %s", (slot,)).fetchone()
    return None if row is None else row[0]


def test_blocked_broker_status_updates_continue_position_holds_nothing_lost(
        database_url: str, slot_name: str, watcher: Watcher, start_relay: StartRelay) -> None:
    relay = start_relay(WALFEED_RELAY_WINDOW="10", WALFEED_RELAY_BLOCKED_TIMEOUT=str(BLOCKED_TIMEOUT))
    warm = set(write_events(database_url, 5))
    eventually(lambda: watcher.has_all(warm), timeout=30, what="warm-up events delivered")
    try:
        watermark("0.000001")
        ids = set(write_events(database_url, 40, per_txn=4))  # more than the window
        written = current_lsn(database_url)
        eventually(lambda: "broker blocked publishing" in relay.log(), timeout=30, what="relay sees the block")
        # Status updates go on while blocked (wal_sender_timeout would otherwise kill the walsender)...
        first = eventually(lambda: reply_time(database_url, slot_name), timeout=10, what="a reply time")
        assert first is not None
        eventually(lambda: (t := reply_time(database_url, slot_name)) is not None and t > first, timeout=10,
                   what="reply_time advances while blocked")
        # ... the relay gives up a connection blocked longer than WALFEED_RELAY_BLOCKED_TIMEOUT and reconnects
        # (to be blocked again: nothing waits forever, nothing is dropped) ...
        eventually(lambda: "broker connection lost" in relay.log(), timeout=3 * BLOCKED_TIMEOUT + 10,
                   what="the blocked connection given up after the blocked timeout")
        last = eventually(lambda: reply_time(database_url, slot_name), timeout=10, what="a reply time")
        assert last is not None
        eventually(lambda: (t := reply_time(database_url, slot_name)) is not None and t > last, timeout=10,
                   what="reply_time still advances after the reconnect")
        # ... and the confirmed position stays behind the events the broker did not take. (A publish already
        # read by the broker when it blocks may still go through: the check is that some are held, and the
        # position with them.)
        watcher.pump()
        assert not ids.issubset(watcher.ids()), "the alarm held nothing back"
        assert slot_lsn(database_url, slot_name) < written
        assert relay.running()
    finally:
        watermark("0.4")
    eventually(lambda: watcher.has_all(ids), timeout=90, interval=0.5, what="every event after the alarm")
    eventually(lambda: slot_lsn(database_url, slot_name) >= written, timeout=60, what="position released")
    assert relay.running()
