"""The database side of outbox.py, for the consumers of the events exchange (psycopg 3): a batch's events applied
with a pooled connection, their outbox rows and processed records read, the processed records written."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from typing import Any, Final, TypeVar

import orjson
import psycopg
from psycopg import sql
from psycopg_pool import ConnectionPool

from services.consumer import outbox
from services.consumer.outcomes import Expected, Poison, Unavailable, reason_text
from services.core import events as ev

Conn = psycopg.Connection[Any]
T = TypeVar("T")

DUPLICATE: Final = "duplicate"  # what a consumer did with an event it had processed already: nothing

# The outbox rows of the batch's events as this transaction sees them (an id missing: not visible yet, or forged)
# and whether this consumer processed them. Taken after the consumer's locks, so a duplicate that committed
# meanwhile is seen. Looked up by primary key from an unnest of ids through a LATERAL subquery with OFFSET 0 (the
# planner cannot flatten it): one index probe per id whatever the statistics say (tests/integration/worker/
# test_plans.py). The payload comes as text, parsed with orjson: psycopg's jsonb loader (the standard library's
# json) cost more per event than any other part of reading the batch.
KNOWN_EVENTS: Final = sql.SQL("""
SELECT o.id, o.type, o.payload::text AS payload, pe.event_id IS NOT NULL AS processed
FROM unnest(%(ids)s::uuid[]) AS e(id)
CROSS JOIN LATERAL (SELECT id, type, payload FROM outbox WHERE id = e.id OFFSET 0) o
LEFT JOIN LATERAL (SELECT event_id FROM processed_events
                   WHERE consumer = %(consumer)s AND event_id = e.id OFFSET 0) pe ON true
""")

MARK_PROCESSED_MANY: Final = sql.SQL(
    "INSERT INTO processed_events (consumer, event_id) SELECT %(consumer)s, unnest(%(ids)s::uuid[]) "
    "ON CONFLICT DO NOTHING")

# SQLSTATE classes and codes of failures that are the database's, not a statement's: connection exceptions,
# transaction rollbacks (deadlock, serialization), insufficient resources, operator intervention but a cancel.
_UNAVAILABLE_CLASSES: Final = ("08", "40", "53")
_UNAVAILABLE_CODES: Final = ("57P01", "57P02", "57P03")


def unavailable(exc: psycopg.OperationalError) -> bool:
    """Whether a failure says nothing about the statements: no connection (no SQLSTATE at all, or a pool that had
    none to give), a connection or resource failure, a deadlock or serialization failure, a server shutdown. A
    statement timeout (57014) is not: the batch may hold the event that caused it."""
    state = exc.sqlstate
    return state is None or state[:2] in _UNAVAILABLE_CLASSES or state in _UNAVAILABLE_CODES


def apply_batch(pool: ConnectionPool, events: Iterable[ev.Event],
                apply: Callable[[Conn, list[ev.Event]], dict[ev.Event, T]]) -> dict[ev.Event, T]:
    """`apply` on the distinct events of a batch with a pooled connection. A failure of the database itself
    (`unavailable`) becomes outcomes.Unavailable: no message of the batch is to blame."""
    unique = outbox.distinct(events)
    if not unique:
        return {}
    try:
        with pool.connection() as conn:
            return apply(conn, unique)
    except psycopg.OperationalError as exc:
        if unavailable(exc):
            raise Unavailable(reason_text(exc)) from exc
        raise


def known_events(conn: Conn, consumer: str, events: Iterable[ev.Event]) -> dict[uuid.UUID, outbox.Known]:
    """What the database holds for each event id (KNOWN_EVENTS), as `consumer` sees it: an id that is missing has
    no visible outbox row."""
    rows = conn.execute(KNOWN_EVENTS, {"consumer": consumer, "ids": list({e.id for e in events})}).fetchall()
    return {r["id"]: outbox.Known(r["type"], orjson.loads(r["payload"]), r["processed"]) for r in rows}


def real_and_new(conn: Conn, consumer: str, unique: list[ev.Event],
                 done: dict[ev.Event, str | Expected | Poison]) -> list[ev.Event]:
    """The events of a batch that are real and that `consumer` has not processed, in order (docs/adr/0022); the
    others get their outcome in `done`: the failure outbox.check finds, or DUPLICATE. In the caller's transaction,
    after its locks (a duplicate committed meanwhile is seen)."""
    known = known_events(conn, consumer, unique)
    real = []
    for event in unique:
        failure = outbox.check(event, known.get(event.id))
        if failure is not None:
            done[event] = failure
        elif known[event.id].processed:
            done[event] = DUPLICATE
        else:
            real.append(event)
    return real


def mark_processed(conn: Conn, consumer: str, event_ids: list[uuid.UUID]) -> None:
    """Record the events processed by `consumer`, in the caller's transaction."""
    if event_ids:
        conn.execute(MARK_PROCESSED_MANY, {"consumer": consumer, "ids": event_ids})
