"""Crashes of the relay: SIGKILL at random moments during a burst, restart; nothing may be missing."""

from __future__ import annotations

import functools
import random
import signal
import threading
from collections import Counter

import pytest

from testkit.waiting import eventually
from tests.integration.relay.conftest import StartRelay, Watcher, slot_lsn, write_events

pytestmark = pytest.mark.integration


def test_sigkill_during_a_burst_loses_nothing(database_url: str, slot_name: str, watcher: Watcher,
                                              start_relay: StartRelay) -> None:
    relay = start_relay()
    written: list[str] = []
    writer = threading.Thread(target=lambda: written.extend(write_events(database_url, 3000, per_txn=5)))
    writer.start()
    rnd = random.Random()
    for kill in range(4):
        count = len(watcher.messages)
        def progressed(since: int) -> bool:
            return watcher.pump() > since + rnd.randint(50, 400) or not writer.is_alive()

        eventually(functools.partial(progressed, count), timeout=60, what=f"progress before kill {kill}")
        relay.kill()
        mark = len(relay.log())
        relay.start()
    writer.join(120)
    expected = set(written)
    assert len(expected) == 3000
    eventually(lambda: watcher.has_all(expected), timeout=90, what="every event after the crashes")
    counts = Counter(watcher.ids())
    duplicates = {i: n for i, n in counts.items() if n > 1}
    print(f"\nrelay crash test: {len(expected)} events, {len(watcher.messages)} deliveries, "
          f"{len(duplicates)} ids duplicated ({sum(duplicates.values()) - len(duplicates)} extra copies)")
    assert set(counts) == expected
    assert slot_lsn(database_url, slot_name) > 0
    # a SIGTERM while the interpreter is still importing would end it with -15: stop the relay once it runs
    eventually(lambda: "streaming" in relay.log()[mark:], timeout=30, what="the last relay streaming")
    assert relay.stop(signal.SIGTERM) == 0
