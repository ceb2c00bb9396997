"""The polling source's SQL (bound parameters only) and the outbox row -> event mapping. No I/O here.

Claim: one autocommit statement. Rows another poller is claiming right now are skipped (SKIP LOCKED); rows it
claimed before are skipped by their lease (`claim_expires_at` in the future), re-checked by Postgres on the
latest row version after the lock, so two pollers never hold the same row while its lease runs.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Final

from services.core import tracecontext
from services.core.events import Event

CLAIM: Final = """
WITH picked AS MATERIALIZED (
    SELECT id FROM outbox
    WHERE published_at IS NULL AND (claim_expires_at IS NULL OR claim_expires_at < now())
    ORDER BY created_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE outbox AS o
SET claimed_by = %(poller)s, claim_expires_at = now() + make_interval(secs => %(lease)s)
FROM picked
WHERE o.id = picked.id
RETURNING o.id, o.aggregatetype, o.aggregateid, o.type, o.payload, o.created_at, o.tracingspancontext
"""

# Confirmed by the broker is a fact whoever holds the lease now: mark it even if another poller re-claimed the
# row after our lease ran out (that poller's publish is then a duplicate, which at-least-once allows).
MARK_PUBLISHED: Final = "UPDATE outbox SET published_at = now() WHERE id = ANY(%(ids)s) AND published_at IS NULL"

Row = tuple[Any, ...]  # (id, aggregatetype, aggregateid, type, payload, created_at, tracingspancontext): CLAIM's


def claim_params(poller: str, limit: int, lease: float) -> dict[str, Any]:
    return {"poller": poller, "limit": limit, "lease": lease}


def mark_params(ids: Sequence[str]) -> dict[str, Any]:
    return {"ids": [uuid.UUID(i) for i in ids]}


def row_event(row: Row) -> Event:
    """A claimed outbox row as the event envelope; the payload is passed through as written (as the CDC source)."""
    event_id, aggregate_type, aggregate_id, type_, payload, created_at = row[:6]
    if not isinstance(created_at, datetime):
        raise TypeError(f"outbox.created_at must be a timestamptz, got {created_at!r}")
    return Event(id=event_id if isinstance(event_id, uuid.UUID) else uuid.UUID(str(event_id)), type=str(type_),
                 aggregate_type=str(aggregate_type), aggregate_id=str(aggregate_id), occurred_at=created_at,
                 payload=payload)


def row_traceparent(row: Row) -> str | None:
    """The claimed row's trace context for the message header (as the CDC source reads it), or None."""
    parent = tracecontext.from_column(row[6])
    return parent.header if parent is not None else None


def claim_order(rows: Sequence[Row]) -> list[Row]:
    """RETURNING has no order: publish in (created_at, id) order, the order rows were picked in."""
    return sorted(rows, key=lambda r: (r[5], str(r[0])))
