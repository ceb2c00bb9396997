"""`walfeed relay --source poll`: happy path, two pollers at once, SIGTERM. Real Postgres, RabbitMQ, processes."""

from __future__ import annotations

import signal
import threading
from collections import Counter
from collections.abc import Callable
from functools import partial

import psycopg
import pytest

from testkit.processes import Process, Processes
from testkit.waiting import eventually
from tests.integration.relay.conftest import RELAY_ENV, Watcher, assert_published_as_spec, write_events

pytestmark = pytest.mark.integration

POLL_ENV = {**RELAY_ENV, "WALFEED_POLL_INTERVAL": "0.1", "WALFEED_RELAY_SHUTDOWN_TIMEOUT": "20"}
StartPoller = Callable[..., Process]


@pytest.fixture
def start_poller(processes: Processes) -> StartPoller:
    def start(name: str = "poller", **env: str) -> Process:
        return processes.start(name, "relay", "--source", "poll", env={**POLL_ENV, **env})
    return start


def started(poller: Process, times: int) -> bool:
    """The poller has logged its start more than `times` times (restarts append to the same log)."""
    return poller.log().count("poll: polling") > times


def outbox_state(database_url: str) -> dict[str, tuple[str | None, bool]]:
    """event id -> (claimed_by, published)."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        rows = conn.execute("SELECT id::text, claimed_by, published_at IS NOT NULL FROM outbox").fetchall()
    return {r[0]: (r[1], r[2]) for r in rows}


def all_marked(database_url: str) -> bool:
    return all(published for _, published in outbox_state(database_url).values())


def duplicates(watcher: Watcher) -> dict[str, int]:
    return {i: n for i, n in Counter(watcher.ids()).items() if n > 1}


def test_rows_are_published_once_with_body_and_properties_then_marked(
        database_url: str, watcher: Watcher, start_poller: StartPoller) -> None:
    poller = start_poller()
    ids = write_events(database_url, 30, per_txn=7)
    eventually(lambda: watcher.has_all(set(ids)), timeout=30, what="all events on the exchange")
    eventually(lambda: all_marked(database_url), timeout=30, what="published_at set on every row")

    assert_published_as_spec(watcher, ids[0])
    assert sorted(watcher.ids()) == sorted(ids)  # no crash, no duplicate
    holders = {holder for holder, _ in outbox_state(database_url).values()}
    assert len(holders) == 1 and str(poller.pid) in str(holders.pop())
    assert poller.running()


def test_two_pollers_share_a_burst_without_publishing_twice(
        database_url: str, watcher: Watcher, start_poller: StartPoller) -> None:
    pollers = [start_poller("poller-a", WALFEED_POLL_BATCH="50"), start_poller("poller-b", WALFEED_POLL_BATCH="50")]
    for p in pollers:
        eventually(partial(started, p, 0), timeout=30, what=f"{p.name} started")
    written: list[str] = []
    writers = [threading.Thread(target=lambda: written.extend(write_events(database_url, 1500, per_txn=5)))
               for _ in range(2)]
    for w in writers:
        w.start()
    for w in writers:
        w.join(120)
    assert len(set(written)) == 3000
    eventually(lambda: watcher.has_all(set(written)), timeout=90, what="every event of the burst")
    eventually(lambda: all_marked(database_url), timeout=30, what="every row marked")
    by_poller = Counter(holder for holder, _ in outbox_state(database_url).values())
    print(f"\ntwo pollers: {len(watcher.ids())} deliveries of {len(written)} events, rows per poller "
          f"{sorted(by_poller.values())}, {len(duplicates(watcher))} duplicated")
    assert duplicates(watcher) == {}  # leases of 30 s never ran out: no row was claimed twice
    assert len(by_poller) == 2, "both pollers took part"
    assert all(p.stop(signal.SIGTERM) == 0 for p in pollers)


def test_sigterm_mid_burst_confirms_and_marks_what_it_claimed_and_exits_zero(
        database_url: str, watcher: Watcher, start_poller: StartPoller) -> None:
    ids = write_events(database_url, 20000, per_txn=1000)
    poller = start_poller(WALFEED_POLL_BATCH="200")
    eventually(lambda: watcher.pump(budget=0.05) > 100, timeout=60, what="publishing under way")
    assert poller.stop(signal.SIGTERM, timeout=30) == 0
    log = poller.log()
    assert "stopped" in log and "unconfirmed=0" in log
    state = outbox_state(database_url)
    held = [i for i, (holder, published) in state.items() if holder is not None and not published]
    marked = sum(published for _, published in state.values())
    print(f"\nSIGTERM after {marked} of {len(ids)} rows marked")
    assert marked < len(ids), "stopped mid-burst"
    assert held == [], "every row it claimed was confirmed and marked before it exited"
    # A successor publishes only the rest: nothing twice, nothing missing.
    start_poller("successor")
    eventually(lambda: watcher.has_all(set(ids)), timeout=60, what="the rest, by a successor")
    eventually(lambda: all_marked(database_url), timeout=30, what="every row marked")
    assert duplicates(watcher) == {}
