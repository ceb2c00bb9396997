"""Parse wal2json format-version 2 messages into what the relay acts on. Pure: bytes in, immutable values out.

With the options of `OPTIONS` the stream holds, per transaction, {"action":"B"}, then one {"action":"I"} per
outbox insert, then {"action":"C","lsn":..,"nextlsn":..}. Transactions touching only other tables still yield
their B/C pair, which is what lets the confirmed position follow a busy database with an idle outbox.

An outbox insert is turned straight into its AMQP body (`Insert.body`), byte for byte what
`services.core.events.encode` makes of the row's `Event`, without building the `Event`: the id and `created_at`
are used as Postgres printed them when they are in the canonical forms (lowercase uuid, ISO timestamp in UTC, which
the replication session asks for), else the row goes through the `Event` (`outbox_event`), the reference path.
"""

from __future__ import annotations

import functools
import re
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, NamedTuple

import orjson

from services.core.events import Event, encode

OUTBOX_TABLE: Final = "public.outbox"
_SCHEMA, _TABLE = OUTBOX_TABLE.split(".")
OPTIONS: Final[dict[str, str]] = {
    "format-version": "2",
    "include-lsn": "1",
    "include-types": "0",
    "include-timestamp": "0",
    "add-tables": OUTBOX_TABLE,
    "actions": "insert",
}


class MessageError(ValueError):
    """A wal2json message the relay cannot understand. The stream is not trustworthy past it: stop."""


@dataclass(frozen=True, slots=True)
class Begin:
    pass


@dataclass(frozen=True, slots=True)
class Commit:
    lsn: int  # start of the commit record
    next_lsn: int  # end of the commit record: the position to confirm once the transaction is published


class Insert(NamedTuple):
    """An outbox row, as its AMQP message (SPEC.md section 5). Immutable; a NamedTuple because one is built per
    event (a frozen dataclass's __init__ costs about three times as much)."""

    event_id: str
    type: str
    body: bytes  # == services.core.events.encode(the row's Event)
    timestamp: int  # occurred_at, whole seconds since the epoch


@dataclass(frozen=True, slots=True)
class Ignored:
    action: str


Message = Begin | Commit | Insert | Ignored


def parse_lsn(text: str) -> int:
    """'16/B374D848' -> int."""
    try:
        high, low = text.split("/")
        return (int(high, 16) << 32) | int(low, 16)
    except (ValueError, AttributeError):
        raise MessageError(f"invalid LSN {text!r}") from None


def format_lsn(lsn: int) -> str:
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def parse(payload: bytes | str) -> Message:
    try:
        data = orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        raise MessageError(f"wal2json message is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise MessageError("wal2json message is not an object")
    action = data.get("action")
    if action == "B":
        return Begin()
    if action == "C":
        return Commit(parse_lsn(data.get("lsn", "")), parse_lsn(data.get("nextlsn", "")))
    if action == "I" and data.get("table") == _TABLE and data.get("schema") == _SCHEMA:
        return outbox_insert(data.get("columns"))
    return Ignored(str(action))


# Postgres' canonical output of a uuid, and of a timestamptz with DateStyle ISO and TimeZone UTC.
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_UTC = re.compile(r"(\d{4}-\d\d-\d\d) (\d\d:\d\d:\d\d)(?:\.(\d{1,6}))?\+00")


def outbox_insert(columns: Any) -> Insert:
    """The AMQP message of an outbox row, built from the column texts (the fast path of `outbox_event` + encode)."""
    row = _row(columns)
    event_id, created = row.get("id"), row.get("created_at")
    occurred = _occurred(created) if isinstance(created, str) else None
    if occurred is None or not isinstance(event_id, str) or _UUID.fullmatch(event_id) is None:
        event = outbox_event(columns)
        return Insert(str(event.id), event.type, encode(event), int(event.occurred_at.timestamp()))
    try:
        raw, type = row["payload"], str(row["type"])
        body = orjson.dumps({
            "id": event_id,
            "type": type,
            "aggregate_type": str(row["aggregatetype"]),
            "aggregate_id": str(row["aggregateid"]),
            "occurred_at": occurred[0],
            "payload": orjson.loads(raw) if isinstance(raw, str) else raw,
        })
    except KeyError as exc:
        raise MessageError(f"outbox insert without column {exc.args[0]!r}") from None
    except (ValueError, orjson.JSONDecodeError) as exc:
        raise MessageError(f"outbox insert with an invalid value: {exc}") from None
    return Insert(event_id, type, body, occurred[1])


@functools.lru_cache(maxsize=256)  # created_at is now(), the transaction's start: shared by all its events
def _occurred(created: str) -> tuple[str, int] | None:
    """A canonical created_at text as (occurred_at of the body, whole seconds since the epoch); None when it is
    not canonical (or not a valid time): the reference path takes it."""
    when = _UTC.fullmatch(created)
    if when is None:
        return None
    date, clock, fraction = when.groups()
    try:
        return _iso_utc(date, clock, fraction), int(datetime.fromisoformat(f"{date}T{clock}+00:00").timestamp())
    except ValueError:
        return None


def _iso_utc(date: str, clock: str, fraction: str | None) -> str:
    """As datetime.isoformat() + "Z": microseconds printed in full, and only when not zero (Postgres trims them)."""
    if fraction and fraction.strip("0"):
        return f"{date}T{clock}.{fraction.ljust(6, '0')}Z"
    return f"{date}T{clock}Z"


def _row(columns: Any) -> dict[Any, Any]:
    if not isinstance(columns, list):
        raise MessageError("insert without columns")
    try:
        return {c["name"]: c["value"] for c in columns}  # per event: no per-column isinstance/get
    except (TypeError, KeyError):
        raise MessageError("insert with a column that is not a {name, value} object") from None


def outbox_event(columns: Any) -> Event:
    """An outbox row (Debezium outbox column names) as the event envelope. The payload is passed through as is:
    judging it is the consumer's job (it dead-letters what it cannot process), losing it is nobody's."""
    row = _row(columns)
    try:
        raw = row["payload"]
        payload: dict[str, int] = orjson.loads(raw) if isinstance(raw, str) else raw
        return Event(
            id=uuid.UUID(str(row["id"])),
            type=str(row["type"]),
            aggregate_type=str(row["aggregatetype"]),
            aggregate_id=str(row["aggregateid"]),
            occurred_at=datetime.fromisoformat(str(row["created_at"])),
            payload=payload,  # as written; not validated here
        )
    except KeyError as exc:
        raise MessageError(f"outbox insert without column {exc.args[0]!r}") from None
    except (ValueError, orjson.JSONDecodeError) as exc:
        raise MessageError(f"outbox insert with an invalid value: {exc}") from None
