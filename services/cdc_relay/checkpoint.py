"""The relay's failover checkpoint timer (docs/adr/0091): every WALFEED_RELAY_CHECKPOINT_INTERVAL seconds,
walfeed_relay_checkpoint (db/init/013_relay_checkpoint.sql) makes the waiting watermark the checkpoint once the
slot's confirmed position passed it, and records the next one. One statement a tick on a connection of its own; a
failure is retried at the next tick and never stops the relay (while Postgres is down the relay says so)."""

from __future__ import annotations

import logging
from typing import Any, Final

import psycopg
from prometheus_client import Counter

from services.cdc_relay import metrics

log = logging.getLogger(__name__)

CHECKPOINTS = Counter("walfeed_relay_checkpoints_total", "Failover checkpoints advanced (the slot passed a watermark)")

ADVANCE: Final = "SELECT walfeed_relay_checkpoint(%(slot)s) AS state"


class CheckpointThread(metrics.Periodic):
    failure_level = logging.DEBUG

    def __init__(self, database_url: str, slot: str, interval: float) -> None:
        super().__init__("checkpoint", database_url, interval)
        self._slot = slot

    def tick(self, conn: psycopg.Connection[dict[str, Any]]) -> None:
        row = conn.execute(ADVANCE, {"slot": self._slot}).fetchone()
        if row is not None and row["state"] == "advanced":
            CHECKPOINTS.inc()
