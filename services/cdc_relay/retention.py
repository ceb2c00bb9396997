"""The relay's retention task: measures the outbox and processed_events every `measure_every` seconds (the
metrics), and prunes them every `prune_every` seconds when WALFEED_RELAY_PRUNE_OLDER_THAN is set (docs/adr/0071).
A thread with its own connection; a failure is logged and retried at the next tick, never stops the relay."""

from __future__ import annotations

import logging
import time
from datetime import timedelta
from typing import Any

import psycopg

from services.cdc_relay import metrics
from services.core import retention

log = logging.getLogger(__name__)


class RetentionThread(metrics.Periodic):
    def __init__(self, database_url: str, slot: str, measure_every: float, older_than: timedelta | None,
                 prune_every: float) -> None:
        super().__init__("retention", database_url, measure_every)
        self._slot, self._older_than, self._prune_every = slot, older_than, prune_every
        self._last_prune = time.monotonic()  # the first prune after one interval: a starting relay is busy enough

    def tick(self, conn: psycopg.Connection[dict[str, Any]]) -> None:
        found = retention.sizes(conn)
        metrics.OUTBOX_ROWS.set(found.outbox_rows)
        metrics.OUTBOX_BYTES.set(found.outbox_bytes)
        metrics.PROCESSED_ROWS.set(found.processed_rows)
        metrics.PROCESSED_BYTES.set(found.processed_bytes)
        if self._older_than is not None and time.monotonic() - self._last_prune >= self._prune_every:
            self._last_prune = time.monotonic()
            pruned = retention.prune(conn, self._slot, self._older_than, should_stop=self._stop.is_set)
            metrics.PRUNED.labels("outbox").inc(pruned.outbox)
            metrics.PRUNED.labels("processed_events").inc(pruned.processed)
            log.info("pruned", extra={"action": "prune", "outbox": pruned.outbox,
                                      "processed_events": pruned.processed, "note": pruned.note or ""})
