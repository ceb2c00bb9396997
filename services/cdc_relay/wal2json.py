"""Parse wal2json format-version 2 messages into what the relay acts on. Pure: bytes in, immutable values out.

With the options of `OPTIONS` the stream holds, per transaction, {"action":"B"}, then one {"action":"I"} per
outbox insert, then {"action":"C","lsn":..,"nextlsn":..}. Transactions touching only other tables still yield
their B/C pair, which is what lets the confirmed position follow a busy database with an idle outbox.

An outbox insert is turned into its AMQP body (`Insert.body`), byte for byte what `services.core.events.encode`
makes of the row's `Event`. Two paths lead there:

- the fast path (`fast_insert`) reads the message as the bytes wal2json prints for a row of the outbox table as
  db/init creates it: the six event columns in table order, each a JSON string without escapes (the payload's
  escapes excepted), the id and created_at in Postgres' canonical forms (lowercase uuid; ISO timestamp in UTC,
  which the replication session asks for), then null columns (the polling source's) and the trace column
  (`tracingspancontext`: null, or `traceparent=` and a version-00 traceparent, as the api writes it). One regular
  expression instead of a JSON parse: the relay's CPU per event is what its throughput is made of on a busy
  machine, and decoding the whole message (every column as a dict) was its largest part (docs/adr/0015);
- every other message goes through `orjson` and, for an insert, through the `Event` (`outbox_event`): the
  reference path. A message the fast path does not match costs more, never changes the result.
"""

from __future__ import annotations

import functools
import re
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, NamedTuple

import orjson

from services.core import tracecontext
from services.core.events import Event, encode, epoch_seconds

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
    next_lsn: int  # the position to confirm once the transaction is published


class Insert(NamedTuple):
    """An outbox row, as its AMQP message (docs/events.md). Immutable; a NamedTuple because one is built per
    event (docs/adr/0015)."""

    event_id: str
    type: str
    body: bytes  # == services.core.events.encode(the row's Event)
    timestamp: int  # occurred_at, whole seconds since the epoch
    traceparent: str | None = None  # the row's trace context (its tracingspancontext column), for the header


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


def parse(payload: bytes) -> Message:
    insert = fast_insert(payload)
    if insert is not None:
        return insert
    try:
        data = orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        raise MessageError(f"wal2json message is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise MessageError("wal2json message is not an object")
    action = data.get("action")
    if action == "B":
        return _BEGIN
    if action == "C":
        return Commit(parse_lsn(data.get("nextlsn", "")))
    if action == "I" and data.get("table") == _TABLE and data.get("schema") == _SCHEMA:
        row = _row(data.get("columns"))
        event = _event(row)
        return Insert(str(event.id), event.type, encode(event), epoch_seconds(event.occurred_at), _traceparent(row))
    return Ignored(str(action))


_BEGIN: Final = Begin()
_TEXT = rb'"([^"\\]*)"'  # a JSON string without escapes: its bytes are its UTF-8 text
_OUTBOX_INSERT = re.compile(
    rb'\{"action":"I","lsn":"[0-9A-F]+/[0-9A-F]+","schema":"%s","table":"%s","columns":\['
    rb'\{"name":"id","value":"([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})"\},'
    rb'\{"name":"aggregatetype","value":%s\},'
    rb'\{"name":"aggregateid","value":%s\},'
    rb'\{"name":"type","value":%s\},'
    rb'\{"name":"payload","value":("[^"\\]*(?:\\.[^"\\]*)*")\},'  # a JSON string, escapes and all
    rb'\{"name":"created_at","value":%s\}'
    rb'(?:,\{"name":"\w+","value":null\})*'
    rb'(?:,\{"name":"%s","value":"%s=(00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2})"\})?'
    rb'(?:,\{"name":"\w+","value":null\})*\]\}'
    % (re.escape(_SCHEMA.encode()), re.escape(_TABLE.encode()), _TEXT, _TEXT, _TEXT, _TEXT,
       tracecontext.COLUMN.encode(), tracecontext.COLUMN_KEY.encode())
)


def fast_insert(payload: bytes) -> Insert | None:
    """The AMQP message of an outbox insert in the layout wal2json prints for the outbox table; None for any other
    message (which `parse` then reads the reference way)."""
    match = _OUTBOX_INSERT.fullmatch(payload)
    if match is None:
        return None
    event_id, aggregate_type, aggregate_id, type, payload_json, created, trace = match.groups()
    occurred = _occurred(created)
    if occurred is None:
        return None
    try:
        message_id, event_type = event_id.decode(), type.decode()
        body = orjson.dumps({
            "id": message_id,
            "type": event_type,
            "aggregate_type": aggregate_type.decode(),
            "aggregate_id": aggregate_id.decode(),
            "occurred_at": occurred[0],
            "payload": orjson.loads(orjson.loads(payload_json)),  # the column's text, then the jsonb it holds
        })
    except (UnicodeDecodeError, orjson.JSONDecodeError):
        return None  # the reference path says what is wrong with it
    return Insert(message_id, event_type, body, occurred[1], trace.decode() if trace is not None else None)


# Postgres' canonical output of a timestamptz with DateStyle ISO and TimeZone UTC.
_UTC = re.compile(rb"(\d{4}-\d\d-\d\d) (\d\d:\d\d:\d\d)(?:\.(\d{1,6}))?\+00")


@functools.lru_cache(maxsize=256)  # now(), shared by all events of the transaction
def _occurred(created: bytes) -> tuple[str, int] | None:
    """A canonical created_at text as (occurred_at of the body, whole seconds since the epoch); None when it is
    not canonical (or not a valid time): the reference path takes it."""
    when = _UTC.fullmatch(created)
    if when is None:
        return None
    date, clock, fraction = (part.decode() if part is not None else None for part in when.groups())
    assert date is not None and clock is not None  # not optional in the pattern
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
    return _event(_row(columns))


def _traceparent(row: dict[Any, Any]) -> str | None:
    """The row's trace context for the message header; None when it has none, or none valid (a trace context
    is never a reason to hold an event back: the event is published without it)."""
    parent = tracecontext.from_column(row.get(tracecontext.COLUMN))
    return parent.header if parent is not None else None


def _event(row: dict[Any, Any]) -> Event:
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
