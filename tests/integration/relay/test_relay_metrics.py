"""The relay's /metrics: every series an operator needs is there and moves with what happens."""

from __future__ import annotations

from collections.abc import Callable

import pika
import psycopg
import pytest

from services.core.topology import Topology
from testkit import metrics
from testkit.infra import Infra
from testkit.processes import free_port
from testkit.waiting import eventually
from tests.integration.relay.conftest import StartRelay, write_events

pytestmark = pytest.mark.integration

FILLER = 4 * 1024 * 1024  # bytes of WAL written to another table while the position is held


def scrape(port: int) -> dict[str, float]:
    """Every sample of the relay's metrics, by name and labels: {'name{label="v"}': value}."""
    return metrics.samples(metrics.scrape(f"http://127.0.0.1:{port}/metrics"))


def scrape_when(port: int, condition: Callable[[dict[str, float]], bool]) -> dict[str, float] | None:
    samples = scrape(port)
    return samples if condition(samples) else None


def test_metrics_move_with_publishes_returns_lag_and_reconnects(
        infra: Infra, topology: Topology, database_url: str, slot_name: str,
        start_relay: StartRelay) -> None:
    port = free_port()
    relay = start_relay(WALFEED_RELAY_METRICS_PORT=str(port), WALFEED_RELAY_LAG_INTERVAL="0.5")
    eventually(lambda: "streaming" in relay.log() and "broker connected" in relay.log(), timeout=30,
               what="relay streaming")
    first = eventually(lambda: scrape(port), timeout=10, what="metrics endpoint")
    for name in ("walfeed_relay_events_published_total", "walfeed_relay_in_flight_events",
                 "walfeed_relay_slot_lag_bytes", "walfeed_relay_confirm_latency_seconds_count",
                 'walfeed_relay_reconnects_total{target="postgres"}',
                 'walfeed_relay_reconnects_total{target="rabbitmq"}'):
        assert name in first, name
    assert first["walfeed_relay_events_published_total"] == 0
    assert first['walfeed_relay_reconnects_total{target="postgres"}'] == 0

    # No queue bound yet on the grouped exchange: walfeed's copies come back unroutable, stay in flight and hold the
    # slot's position; the events' single messages (not mandatory, nobody bound on the events exchange) are confirmed.
    write_events(database_url, 5, per_txn=5)
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE filler (data text)")
        conn.execute("INSERT INTO filler SELECT repeat('x', 1000) FROM generate_series(1, %s)", (FILLER // 1000,))
    eventually(lambda: scrape(port)["walfeed_relay_in_flight_events"] == 5, timeout=30,
               what="the 5 events' grouped copies in flight")
    held = eventually(lambda: scrape_when(port, lambda m: m["walfeed_relay_slot_lag_bytes"] >= FILLER),
                      timeout=30, what="slot lag grows while the position is held")
    assert held is not None
    assert held["walfeed_relay_events_published_total"] == 0
    assert held["walfeed_relay_events_unroutable_total"] >= 5

    conn = pika.BlockingConnection(pika.URLParameters(infra.amqp_url))
    queue = f"{topology.prefix}.test.metrics"
    try:
        channel = conn.channel()
        channel.queue_declare(queue, auto_delete=False)
        channel.queue_bind(queue, topology.grouped_exchange, "#")
        done = eventually(lambda: scrape_when(port, lambda m: m["walfeed_relay_events_published_total"] == 5),
                          timeout=30, what="5 events published once a queue is bound")
        assert done is not None
        assert done["walfeed_relay_in_flight_events"] == 0
        assert done["walfeed_relay_confirm_latency_seconds_count"] == 5 + 1  # per message: 5 alone, 1 group of 5
        assert done["walfeed_relay_confirm_latency_seconds_sum"] > 0
        eventually(lambda: scrape(port)["walfeed_relay_slot_lag_bytes"] < held["walfeed_relay_slot_lag_bytes"]
                   - FILLER / 2, timeout=30, what="slot lag falls once the position is released")
    finally:
        conn.channel().queue_delete(queue)
        conn.close()

    # The replication connection dies: the relay reconnects and counts it.
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = %s",
                     (slot_name,))
    eventually(lambda: scrape(port)['walfeed_relay_reconnects_total{target="postgres"}'] == 1, timeout=30,
               what="one postgres reconnect counted")
    eventually(lambda: relay.log().count("streaming") == 2, timeout=30, what="streaming again")
