"""Prometheus metrics of the relay, and the slot lag probe (a plain psycopg 3 query on its own thread)."""

from __future__ import annotations

import bisect
import logging
import threading
from collections import Counter as Tally
from collections.abc import Iterable, Iterator
from typing import Any

import psycopg
from prometheus_client import REGISTRY, Counter, Gauge, start_http_server
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.registry import Collector
from psycopg.rows import dict_row, tuple_row

from services.core import slots

log = logging.getLogger(__name__)

# With WALFEED_RELAY_GROUP_MAX above 1 a message may carry several events (grouping.py, docs/adr/0095): the
# counters count events, a group all of its; CONFIRM_LATENCY observes messages. A fan-out event is two messages, one
# on each exchange (routes.py, docs/adr/0115): PUBLISHED counts it once, with its walfeed copy; IN_FLIGHT, UNROUTABLE
# and REPUBLISHED count each copy.
PUBLISHED = Counter("walfeed_relay_events_published_total", "Events confirmed by the broker (each event of a group)")
UNROUTABLE = Counter("walfeed_relay_events_unroutable_total",
                     "Events returned unroutable or nacked (retried); each event of a group")
# Every publish of an event beyond its first, by why: the broker nacked it (a publish routed to several queues is
# nacked when one of them refuses it, and the others keep their copy: docs/adr/0090), returned it unroutable, its
# connection was lost before the broker confirmed it, or a new primary's outbox rows were not covered by the
# checkpoint (failover.py, docs/adr/0091). The duplicates the relay makes are at most these.
REPUBLISHED = Counter("walfeed_relay_events_republished_total",
                      "Events published again, by reason (each event of a republished group)", ["reason"])
for _reason in ("nacked", "returned", "reconnected", "failover"):
    REPUBLISHED.labels(_reason)


class BatchHistogram(Collector):
    """A Prometheus histogram observed a batch at a time: one lock per batch of confirmations instead of two
    lock round trips and a bucket scan per event (prometheus_client's Histogram.observe), which was a visible
    part of the publisher's CPU. Exposes the same _bucket, _count and _sum series."""

    def __init__(self, name: str, documentation: str, buckets: Iterable[float]) -> None:
        self._name, self._doc = name, documentation
        self._bounds = [float(b) for b in buckets] + [float("inf")]
        self._counts = [0] * len(self._bounds)
        self._sum = 0.0
        self._lock = threading.Lock()
        REGISTRY.register(self)

    def observe_since(self, now: float, starts: Iterable[float]) -> None:
        """Observe `now - start` for each of `starts` (events of one batch share a few start times)."""
        starts = list(starts)
        if not starts:
            return
        # Usually every event of an ack frame was first sent in the same publish pass: no tally to build.
        tally = {starts[0]: len(starts)} if starts.count(starts[0]) == len(starts) else Tally(starts)
        with self._lock:
            for start, count in tally.items():
                amount = now - start
                self._counts[bisect.bisect_left(self._bounds, amount)] += count
                self._sum += amount * count

    def collect(self) -> Iterator[HistogramMetricFamily]:
        with self._lock:
            counts, total = list(self._counts), self._sum
        cumulative, buckets = 0, []
        for bound, count in zip(self._bounds, counts, strict=True):
            cumulative += count
            buckets.append(("+Inf" if bound == float("inf") else repr(bound), cumulative))
        yield HistogramMetricFamily(self._name, self._doc, buckets=buckets, sum_value=total)


CONFIRM_LATENCY = BatchHistogram(
    "walfeed_relay_confirm_latency_seconds", "First publish to broker confirm, per message (a group once)",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
IN_FLIGHT = Gauge("walfeed_relay_in_flight_events",
                  "Events read from the source, not confirmed by the broker yet; a fan-out event's two copies apart")
SLOT_LAG = Gauge("walfeed_relay_slot_lag_bytes", "pg_current_wal_lsn() - confirmed_flush_lsn of the slot")
SLOT_RETAINED = Gauge("walfeed_relay_slot_retained_bytes",
                      "pg_current_wal_lsn() - restart_lsn of the slot: WAL the server keeps for it")
CONFIRMED_LSN = Gauge("walfeed_relay_confirmed_lsn", "Last WAL position confirmed to Postgres")
RECONNECTS = Counter("walfeed_relay_reconnects_total", "Reconnections after a lost connection", ["target"])
for _target in ("postgres", "rabbitmq"):
    RECONNECTS.labels(_target)  # exported as 0 from the start, so that rate() and alerts see the series

OUTBOX_ROWS = Gauge("walfeed_relay_outbox_rows", "Outbox rows (the statistics' live row estimate)")
OUTBOX_BYTES = Gauge("walfeed_relay_outbox_bytes", "Outbox size on disk with its indexes")
PROCESSED_ROWS = Gauge("walfeed_relay_processed_events_rows", "Processed-event records (live row estimate)")
PROCESSED_BYTES = Gauge("walfeed_relay_processed_events_bytes", "processed_events size on disk with its indexes")
PRUNED = Counter("walfeed_relay_pruned_rows_total", "Rows deleted by the relay's pruning timer", ["table"])
for _table in ("outbox", "processed_events"):
    PRUNED.labels(_table)


def serve(port: int, host: str) -> None:
    if port:
        start_http_server(port, addr=host)
        log.info("metrics endpoint listening", extra={"host": host, "port": port})


class Periodic(threading.Thread):
    """Runs `tick` every `interval` seconds on a database connection of its own until stopped. A failed tick is
    logged (at `failure_level`), and its connection opened again at the next one."""

    failure_level = logging.WARNING

    def __init__(self, name: str, database_url: str, interval: float) -> None:
        super().__init__(name=name, daemon=True)
        self._url, self._interval = database_url, interval
        self._stop = threading.Event()

    def stop(self) -> None:
        self._stop.set()

    def tick(self, conn: psycopg.Connection[dict[str, Any]]) -> None:
        raise NotImplementedError

    def run(self) -> None:
        conn: psycopg.Connection[dict[str, Any]] | None = None
        while not self._stop.wait(self._interval):
            try:
                if conn is None or conn.closed:
                    conn = psycopg.connect(self._url, autocommit=True, connect_timeout=3, row_factory=dict_row)
                self.tick(conn)
            except psycopg.Error as exc:
                log.log(self.failure_level, "periodic database task failed",
                        extra={"task": self.name, "error": repr(exc)})
                if conn is not None:
                    conn.close()
                conn = None
        if conn is not None:
            conn.close()


class SlotLagProbe(Periodic):
    """Measures the slot lag and the WAL retained for the slot every `interval` seconds until stopped."""

    failure_level = logging.DEBUG  # while Postgres is down the relay itself says so

    def __init__(self, database_url: str, slot: str, interval: float) -> None:
        super().__init__("slot-lag", database_url, interval)
        self._slot = slot

    def tick(self, conn: psycopg.Connection[dict[str, Any]]) -> None:
        slot = slots.find(conn.cursor(row_factory=tuple_row), self._slot)
        if slot is not None and slot.lag_bytes is not None:
            SLOT_LAG.set(slot.lag_bytes)
        if slot is not None and slot.retained_bytes is not None:
            SLOT_RETAINED.set(slot.retained_bytes)
