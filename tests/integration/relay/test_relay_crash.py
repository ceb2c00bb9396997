"""Crashes of the relay: SIGKILL at random moments during a burst, restart; nothing may be missing on either
exchange (docs/adr/0115): the events exchange one event a message, the grouped exchange one event a message or
several (WALFEED_RELAY_GROUP_MAX, docs/adr/0095)."""

from __future__ import annotations

import functools
import random
import signal
import threading
from collections import Counter

import pytest

from services.core.events import GROUP_CONTENT_TYPE
from testkit.waiting import eventually
from tests.integration.relay.conftest import StartRelay, Watcher, slot_lsn, write_events

pytestmark = pytest.mark.integration

MOST = 30_000  # events written at most, should the kills take long


@pytest.mark.parametrize("group_max", ["1", "10"])
def test_sigkill_during_a_burst_loses_nothing(group_max: str, database_url: str, slot_name: str, watcher: Watcher,
                                              start_relay: StartRelay) -> None:
    relay = start_relay(WALFEED_RELAY_GROUP_MAX=group_max)
    written: list[str] = []
    stop = threading.Event()

    def write() -> None:  # until the kills are over: each kill lands while events are written and relayed
        while not stop.is_set() and len(written) < MOST:
            written.extend(write_events(database_url, 50, per_txn=5))

    writer = threading.Thread(target=write)
    writer.start()
    rnd = random.Random()
    for kill in range(4):
        watcher.pump()
        count = len(watcher.event_ids())
        def progressed(since: int) -> bool:  # this relay published, so it was streaming
            watcher.pump()
            return len(watcher.event_ids()) > since + rnd.randint(50, 400) or not writer.is_alive()

        eventually(functools.partial(progressed, count), timeout=60, what=f"progress before kill {kill}")
        relay.kill()
        mark = len(relay.log())
        relay.start()
    stop.set()
    writer.join(120)
    expected = set(written)
    assert len(expected) == len(written) >= 500
    eventually(lambda: watcher.has_all_events(expected) and expected <= set(watcher.grouped_event_ids()),
               timeout=90, what="every event on both exchanges after the crashes")
    for name, ids, messages in (("events", watcher.event_ids(), watcher.messages),
                                ("grouped", watcher.grouped_event_ids(), watcher.grouped)):
        counts = Counter(ids)
        duplicates = {i: n for i, n in counts.items() if n > 1}
        print(f"\nrelay crash test, group max {group_max}, {name} exchange: {len(expected)} events, "
              f"{len(messages)} messages, {len(duplicates)} ids duplicated "
              f"({sum(duplicates.values()) - len(duplicates)} extra copies)")
        assert set(counts) == expected
    assert all(m.properties.content_type != GROUP_CONTENT_TYPE for m in watcher.messages)  # the contract
    grouped = sum(m.properties.content_type == GROUP_CONTENT_TYPE for m in watcher.grouped)
    assert grouped > 0 if group_max != "1" else grouped == 0
    assert slot_lsn(database_url, slot_name) > 0
    # a SIGTERM while the interpreter is still importing would end it with -15: stop the relay once it runs
    eventually(lambda: "streaming" in relay.log()[mark:], timeout=30, what="the last relay streaming")
    assert relay.stop(signal.SIGTERM) == 0
