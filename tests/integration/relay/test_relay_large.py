"""One transaction of 100,000 outbox rows: relayed whole, with memory bounded by the window."""

from __future__ import annotations

import signal
import time

import psycopg
import pytest

from testkit.waiting import eventually
from tests.integration.relay.conftest import _INSERT, StartRelay, Watcher, current_lsn, slot_lsn

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROWS = 100_000
RSS_BOUND_KB = 300 * 1024


def peak_rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError("no VmHWM")


def test_a_100k_row_transaction(database_url: str, slot_name: str, watcher: Watcher,
                                start_relay: StartRelay) -> None:
    relay = start_relay()
    eventually(lambda: "streaming" in relay.log(), timeout=30, what="relay streaming")
    started = time.monotonic()
    with psycopg.connect(database_url) as conn:
        ids = {str(r[0]) for r in conn.execute(_INSERT, (ROWS,)).fetchall()}
    end = current_lsn(database_url)
    eventually(lambda: watcher.has_all(ids), timeout=300, interval=0.5, what="100k events")
    eventually(lambda: slot_lsn(database_url, slot_name) >= end, timeout=60, what="commit confirmed")
    peak = peak_rss_kb(relay.pid)
    print(f"\nlarge transaction: {ROWS} events in {time.monotonic() - started:.1f}s, relay VmHWM {peak // 1024} MB")
    assert peak < RSS_BOUND_KB
    assert relay.stop(signal.SIGTERM) == 0
