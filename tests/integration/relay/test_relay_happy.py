from __future__ import annotations

import pytest

from testkit.waiting import eventually
from tests.integration.relay.conftest import (
    StartRelay,
    Watcher,
    assert_published_as_spec,
    current_lsn,
    slot_lsn,
    write_events,
)

pytestmark = pytest.mark.integration


def test_events_arrive_with_body_and_properties_and_the_slot_advances(
        database_url: str, slot_name: str, watcher: Watcher, start_relay: StartRelay) -> None:
    before = slot_lsn(database_url, slot_name)
    relay = start_relay()
    ids = write_events(database_url, 30, per_txn=7)
    eventually(lambda: watcher.has_all(set(ids)), timeout=30, what="all events on the exchange")
    target = current_lsn(database_url)
    eventually(lambda: slot_lsn(database_url, slot_name) >= target, timeout=30, what="slot confirmed position")
    assert slot_lsn(database_url, slot_name) > before

    assert_published_as_spec(watcher, ids[0])
    assert len(watcher.ids()) == len(ids)  # no crash, no duplicate
    assert relay.running()
