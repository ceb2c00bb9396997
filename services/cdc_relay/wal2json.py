"""Parse wal2json format-version 2 messages into what the relay acts on. Pure: bytes in, frozen dataclasses out.

With the options of `OPTIONS` the stream holds, per transaction, {"action":"B"}, then one {"action":"I"} per
outbox insert, then {"action":"C","lsn":..,"nextlsn":..}. Transactions touching only other tables still yield
their B/C pair, which is what lets the confirmed position follow a busy database with an idle outbox.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

import orjson

from services.core.events import Event

OUTBOX_TABLE: Final = "public.outbox"
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


@dataclass(frozen=True, slots=True)
class Insert:
    event: Event


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
    if action == "I" and f"{data.get('schema')}.{data.get('table')}" == OUTBOX_TABLE:
        return Insert(outbox_event(data.get("columns")))
    return Ignored(str(action))


def outbox_event(columns: Any) -> Event:
    """An outbox row (Debezium outbox column names) as the event envelope. The payload is passed through as is:
    judging it is the consumer's job (it dead-letters what it cannot process), losing it is nobody's."""
    if not isinstance(columns, list):
        raise MessageError("insert without columns")
    row = {c.get("name"): c.get("value") for c in columns if isinstance(c, dict)}
    try:
        raw = row["payload"]
        payload: dict[str, int] = orjson.loads(raw) if isinstance(raw, str) else raw  # type: ignore[assignment]
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
