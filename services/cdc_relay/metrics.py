"""Prometheus metrics of the relay, and the slot lag probe (a plain psycopg 3 query on its own thread)."""

from __future__ import annotations

import logging
import threading

import psycopg
from prometheus_client import Counter, Gauge, Histogram, start_http_server

log = logging.getLogger(__name__)

PUBLISHED = Counter("walfeed_relay_events_published_total", "Events confirmed by the broker")
UNROUTABLE = Counter("walfeed_relay_events_unroutable_total", "Publishes returned unroutable or nacked (retried)")
CONFIRM_LATENCY = Histogram(
    "walfeed_relay_confirm_latency_seconds", "First publish to broker confirm",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
IN_FLIGHT = Gauge("walfeed_relay_in_flight_events", "Events published, not confirmed yet")
SLOT_LAG = Gauge("walfeed_relay_slot_lag_bytes", "pg_current_wal_lsn() - confirmed_flush_lsn of the slot")
CONFIRMED_LSN = Gauge("walfeed_relay_confirmed_lsn", "Last WAL position confirmed to Postgres")
RECONNECTS = Counter("walfeed_relay_reconnects_total", "Reconnections after a lost connection", ["target"])
for _target in ("postgres", "rabbitmq"):
    RECONNECTS.labels(_target)  # exported as 0 from the start, so that rate() and alerts see the series

_LAG = """
SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::bigint
FROM pg_replication_slots WHERE slot_name = %s
"""


def serve(port: int) -> None:
    if port:
        start_http_server(port, addr="0.0.0.0")
        log.info("metrics endpoint listening", extra={"port": port})


class SlotLagProbe(threading.Thread):
    """Measures the slot lag every `interval` seconds until stopped. Failures are logged and retried."""

    def __init__(self, database_url: str, slot: str, interval: float) -> None:
        super().__init__(name="slot-lag", daemon=True)
        self._url, self._slot, self._interval = database_url, slot, interval
        self._stop = threading.Event()

    def stop(self) -> None:
        self._stop.set()

    def run(self) -> None:
        conn: psycopg.Connection[tuple[int]] | None = None
        while not self._stop.wait(self._interval):
            try:
                if conn is None or conn.closed:
                    conn = psycopg.connect(self._url, autocommit=True, connect_timeout=3)
                row = conn.execute(_LAG, (self._slot,)).fetchone()
                if row is not None and row[0] is not None:
                    SLOT_LAG.set(row[0])
            except psycopg.Error as exc:
                log.debug("slot lag probe failed", extra={"error": repr(exc)})
                if conn is not None:
                    conn.close()
                conn = None
        if conn is not None:
            conn.close()
