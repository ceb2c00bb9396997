"""Crashes of the polling source: SIGKILL mid-burst, restart; a dead poller's rows are claimed again after its lease."""

from __future__ import annotations

import random
import signal
import threading
import time
from collections import Counter
from datetime import datetime
from functools import partial

import psycopg
import pytest

from testkit.waiting import eventually
from tests.integration.relay.conftest import Watcher, write_events
from tests.integration.relay.test_poll import StartPoller, all_marked, duplicates, start_poller, started

pytestmark = pytest.mark.integration
__all__ = ["start_poller"]  # the fixture, shared with test_poll.py

SHORT_LEASE = "2"


def claims(database_url: str) -> dict[str, tuple[str | None, datetime | None, datetime | None]]:
    """event id -> (claimed_by, claim_expires_at, published_at)."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        rows = conn.execute("SELECT id::text, claimed_by, claim_expires_at, published_at FROM outbox").fetchall()
    return {r[0]: (r[1], r[2], r[3]) for r in rows}


def progressed(watcher: Watcher, target: int, writer: threading.Thread) -> bool:
    return watcher.pump() >= target or not writer.is_alive()


def paced_writes(database_url: str, count: int, per_second: int) -> list[str]:
    """A steady burst (the load's shape, not a wait for a state): rows in transactions of 2, about `per_second`."""
    ids: list[str] = []
    begin = time.monotonic()
    while len(ids) < count:
        ids.extend(write_events(database_url, min(20, count - len(ids)), per_txn=2))
        ahead = len(ids) / per_second - (time.monotonic() - begin)
        if ahead > 0:
            time.sleep(ahead)
    return ids


def test_sigkill_during_a_burst_loses_nothing(database_url: str, watcher: Watcher,
                                              start_poller: StartPoller) -> None:
    poller = start_poller(WALFEED_POLL_LEASE=SHORT_LEASE, WALFEED_POLL_BATCH="100")
    written: list[str] = []
    writer = threading.Thread(target=lambda: written.extend(paced_writes(database_url, 6000, per_second=600)))
    writer.start()
    rnd = random.Random()
    kills_mid_burst = 0
    for kill in range(4):
        eventually(partial(started, poller, kill), timeout=60, what=f"poller started ({kill})")
        target = len(watcher.messages) + rnd.randint(50, 400)
        eventually(partial(progressed, watcher, target, writer), timeout=60, what=f"progress before kill {kill}")
        kills_mid_burst += writer.is_alive()
        poller.kill()
        poller.start()
    writer.join(120)
    expected = set(written)
    assert len(expected) == 6000
    eventually(lambda: watcher.has_all(expected), timeout=90, what="every event after the crashes")
    eventually(lambda: all_marked(database_url), timeout=30, what="every row marked published")
    counts = Counter(watcher.ids())
    dup = duplicates(watcher)
    print(f"\npoller crash test: {kills_mid_burst} of 4 kills mid-burst, {len(expected)} events, "
          f"{len(watcher.messages)} deliveries, "
          f"{len(dup)} ids duplicated ({sum(dup.values()) - len(dup)} extra copies)")
    assert set(counts) == expected
    assert kills_mid_burst >= 2, "the crashes hit the burst"
    eventually(partial(started, poller, 4), timeout=60, what="the last restart up")
    assert poller.stop(signal.SIGTERM) == 0


def test_a_dead_pollers_rows_are_claimed_again_after_its_lease(
        database_url: str, start_poller: StartPoller, request: pytest.FixtureRequest) -> None:
    # No queue is bound yet: every publish comes back unroutable, so the first poller holds its claims unconfirmed.
    ids = set(write_events(database_url, 300, per_txn=50))
    first = start_poller("poller-a", WALFEED_POLL_LEASE=SHORT_LEASE)
    mine = str(first.pid)
    eventually(lambda: all(c[0] and mine in c[0] for c in claims(database_url).values()), timeout=30,
               what="every row claimed by the first poller")
    held = claims(database_url)
    first.kill()
    assert all(published is None for _, _, published in held.values()), "nothing confirmed: nothing marked"

    watcher: Watcher = request.getfixturevalue("watcher")  # binds the test queue: publishes succeed from now on
    second = start_poller("poller-b", WALFEED_POLL_LEASE=SHORT_LEASE)
    eventually(lambda: watcher.has_all(ids), timeout=60, what="every event, by the second poller")
    eventually(lambda: all_marked(database_url), timeout=30, what="every row marked")
    after = claims(database_url)
    for event_id, (holder, _, published) in after.items():
        dead_expiry = held[event_id][1]
        assert holder is not None and str(second.pid) in holder, "re-claimed by the live poller"
        assert published is not None and dead_expiry is not None and published >= dead_expiry, \
            "not taken before the dead poller's lease ran out"
    assert duplicates(watcher) == {}
    assert second.stop(signal.SIGTERM) == 0
