"""The relay's pruning timer (WALFEED_RELAY_PRUNE_OLDER_THAN, docs/adr/0071): once the broker confirmed the events
and the slot's position passed them, the relay deletes their outbox rows, and its metrics say how many and how
large the outbox is."""

from __future__ import annotations

import psycopg
import pytest

from testkit.processes import free_port
from testkit.waiting import eventually
from tests.integration.relay.conftest import StartRelay, Watcher, write_events
from tests.integration.relay.test_relay_metrics import scrape

pytestmark = pytest.mark.integration


def _outbox(database_url: str) -> int:
    with psycopg.connect(database_url, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM outbox").fetchone()
    assert row is not None
    return int(row[0])


def test_the_relay_prunes_what_it_published_and_exports_the_outbox_size(
        database_url: str, watcher: Watcher, start_relay: StartRelay) -> None:
    port = free_port()
    relay = start_relay(WALFEED_RELAY_METRICS_PORT=str(port), WALFEED_RELAY_LAG_INTERVAL="0.5",
                        WALFEED_RELAY_PRUNE_OLDER_THAN="0", WALFEED_RELAY_PRUNE_INTERVAL="1")
    eventually(lambda: "streaming" in relay.log(), timeout=30, what="relay streaming")
    first = eventually(lambda: scrape(port), timeout=10, what="metrics endpoint")
    for name in ("walfeed_relay_outbox_rows", "walfeed_relay_outbox_bytes", "walfeed_relay_processed_events_rows",
                 "walfeed_relay_processed_events_bytes", 'walfeed_relay_pruned_rows_total{table="outbox"}'):
        assert name in first, name

    ids = set(write_events(database_url, 20, per_txn=4))
    eventually(lambda: watcher.has_all(ids), timeout=30, what="every event published")
    eventually(lambda: _outbox(database_url) == 0, timeout=30, what="the published rows pruned")
    eventually(lambda: scrape(port)['walfeed_relay_pruned_rows_total{table="outbox"}'] == 20, timeout=10,
               what="the pruned rows counted")
    assert scrape(port)["walfeed_relay_outbox_bytes"] > 0
    assert relay.running()
