"""One active relay per slot: a second one stands by and takes over when the active one dies."""

from __future__ import annotations

import signal

import pytest

from testkit.waiting import eventually
from tests.integration.relay.conftest import StartRelay, Watcher, write_events

pytestmark = pytest.mark.integration


def test_standby_takes_over_after_sigkill(database_url: str, watcher: Watcher,
                                          start_relay: StartRelay) -> None:
    active = start_relay("relay-a")
    first = write_events(database_url, 20, per_txn=4)
    eventually(lambda: watcher.has_all(set(first)), timeout=30, what="the first relay streams")
    standby = start_relay("relay-b")
    eventually(lambda: "standby" in standby.log(), timeout=30, what="second relay in standby")
    assert standby.running()

    active.kill()
    second = write_events(database_url, 20, per_txn=4)
    eventually(lambda: watcher.has_all(set(second)), timeout=60, what="the standby took over")
    assert "streaming" in standby.log()
    assert standby.stop(signal.SIGTERM) == 0
