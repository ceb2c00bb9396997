"""SIGTERM: stop reading, wait for outstanding confirms, send the final position, exit 0."""

from __future__ import annotations

import signal

import pytest

from testkit.waiting import eventually
from tests.integration.relay.conftest import StartRelay, Watcher, current_lsn, slot_lsn, write_events

pytestmark = pytest.mark.integration


def test_sigterm_exits_zero_after_final_feedback(database_url: str, slot_name: str, watcher: Watcher,
                                                 start_relay: StartRelay) -> None:
    # A long status interval: the position seen after exit is the final feedback, not a periodic one.
    relay = start_relay(WALFEED_RELAY_STATUS_INTERVAL="30")
    ids = write_events(database_url, 200, per_txn=50)
    end = current_lsn(database_url)
    eventually(lambda: watcher.has_all(set(ids)), timeout=30, what="events published")
    assert relay.stop(signal.SIGTERM, timeout=20) == 0
    assert slot_lsn(database_url, slot_name) >= end
    assert "stopped" in relay.log()


def test_sigint_while_standby_exits_zero(database_url: str, start_relay: StartRelay) -> None:
    active = start_relay("relay-a")
    eventually(lambda: "streaming" in active.log(), timeout=30, what="active relay")
    standby = start_relay("relay-b")
    eventually(lambda: "standby" in standby.log(), timeout=30, what="standby")
    assert standby.stop(signal.SIGINT, timeout=20) == 0
    assert active.stop(signal.SIGTERM, timeout=20) == 0


def test_missing_slot_is_a_clear_error(start_relay: StartRelay) -> None:
    relay = start_relay(WALFEED_SLOT="no_such_slot")
    assert relay.wait(30) != 0
    log = relay.log()
    assert "WALFEED_SLOT" in log and "walfeed migrate" in log
