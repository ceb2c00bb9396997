"""Outbox and processed-event retention (docs/adr/0071): adapter over retention_sql.py, used by `walfeed
prune-outbox` and the relay's pruning timer. Deletes in small batches, each its own short transaction.

An outbox row goes once its event has been confirmed by the broker for at least the duration: the CDC source's
rows once the slot's confirmed position passed a watermark above their transaction that long ago, the polling
source's rows once published that long ago. A processed record goes once its outbox row is gone and it is older
than the duration.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

import psycopg
from psycopg.rows import dict_row

from services.core import retention_sql as q

# Rows per delete transaction: short row locks and WAL bursts on a busy outbox, and a stop between two batches.
BATCH: Final = 1000
_PAST_EVERY_ID: Final = 2**63 - 1  # a notification id to scan after: none


@dataclass(frozen=True, slots=True)
class Pruned:
    confirmed: int  # CDC rows
    published: int  # polling source rows
    processed: int  # processed-event records
    note: str | None = None  # why no CDC row could go, if none could

    @property
    def outbox(self) -> int:
        return self.confirmed + self.published


@dataclass(frozen=True, slots=True)
class Sizes:
    outbox_rows: int
    outbox_bytes: int
    processed_rows: int
    processed_bytes: int
    oldest_unpublished: datetime | None


Conn = psycopg.Connection[dict[str, Any]]


def connect(url: str) -> Conn:
    return psycopg.connect(url, autocommit=True, row_factory=dict_row, connect_timeout=10)


def prune(conn: Conn, slot: str, older_than: timedelta, *, wait: float = 0.0, batch: int = BATCH,
          should_stop: Callable[[], bool] = lambda: False) -> Pruned:
    """Delete what is due, a batch of each kind per transaction. `wait`: seconds to wait for the slot to pass a
    watermark recorded now (a first run, or a zero duration, has none older); 0 uses those of earlier runs.
    `conn` is in autocommit."""
    waiting = _watermark(conn, slot, wait, should_stop)
    confirmed = published = processed = 0
    while not should_stop():
        row = conn.execute(q.PRUNE_BATCH, {"slot": slot, "older_than": older_than, "batch": batch}).fetchone()
        assert row is not None
        confirmed, published, processed = (confirmed + row["confirmed"], published + row["published"],
                                           processed + row["processed"])
        if max(row["confirmed"], row["published"], row["processed"]) < batch:
            break
    note = None
    if waiting is None:
        note = f"no replication slot {slot!r} in this database: only rows the polling source published can go"
    elif not confirmed and waiting:
        note = (f"the slot {slot!r} has not confirmed the position recorded for this run yet (is the relay "
                "running?): rows need a position it confirmed at least --older-than ago")
    return Pruned(confirmed, published, processed, note)


def _watermark(conn: Conn, slot: str, wait: float, should_stop: Callable[[], bool]) -> int | None:
    """Records a watermark (unless one waits already), then waits up to `wait` seconds for the slot to pass every
    waiting one. How many still wait; None: no such slot."""
    deadline = time.monotonic() + wait
    record = True
    while True:
        row = conn.execute(q.WATERMARK, {"slot": slot, "record": record}).fetchone()
        waiting: int | None = row["waiting"] if row else None
        if not waiting or time.monotonic() >= deadline or should_stop():
            return waiting
        record = False  # the one this run waits for is recorded: a new one now would be waited for too
        time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))


@dataclass(frozen=True, slots=True)
class PrunedNotifications:
    deliveries: int
    notifications: int


def prune_notifications(conn: Conn, older_than: timedelta, *, batch: int = BATCH,
                        should_stop: Callable[[], bool] = lambda: False) -> PrunedNotifications:
    """Delete settled deliveries, then read (or withdrawn) notifications left without deliveries, made or settled
    more than `older_than` ago, a batch per transaction (ADR 0100). `conn` is in autocommit."""
    deliveries = notifications = 0
    after = _PAST_EVERY_ID  # first the deliveries alone: a notification goes only once its deliveries are gone
    while not should_stop():
        row = conn.execute(q.PRUNE_NOTIFICATIONS_BATCH, {"older_than": older_than, "batch": batch,
                                                         "after": after}).fetchone()
        assert row is not None
        deliveries += row["deliveries_deleted"]
        notifications += row["notifications_deleted"]
        if after == _PAST_EVERY_ID:
            if row["deliveries_deleted"] < batch:
                after = 0  # now the notifications, in id order
        elif row["next_id"] is None:
            break
        else:
            after = row["next_id"]
    return PrunedNotifications(deliveries, notifications)


def sizes(conn: Conn) -> Sizes:
    found = {r["name"]: r for r in conn.execute(q.SIZES)}
    oldest = conn.execute(q.OLDEST_UNPUBLISHED).fetchone()
    outbox, processed = found.get("outbox", {}), found.get("processed_events", {})
    return Sizes(outbox.get("rows", 0), outbox.get("bytes", 0), processed.get("rows", 0), processed.get("bytes", 0),
                 oldest["oldest"] if oldest else None)
