"""The logical replication slot as Postgres reports it, read one way by all who look: the relay's stream (psycopg2)
and lag probe, `walfeed status` and `walfeed migrate` (psycopg 3). pg_replication_slots and the WAL position are
readable by every role (docs/adr/0060)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

OUTPUT_PLUGIN: Final = "wal2json"

FIND: Final = """
SELECT plugin, database, active, active_pid, confirmed_flush_lsn::text,
       pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::bigint,
       pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint,
       wal_status
FROM pg_replication_slots WHERE slot_name = %s
"""
CREATE: Final = "SELECT lsn FROM pg_create_logical_replication_slot(%s, %s)"


@dataclass(frozen=True, slots=True)
class Slot:
    name: str
    plugin: str | None
    database: str | None
    active: bool
    active_pid: int | None
    confirmed_flush_lsn: str | None  # '16/B374D848'
    lag_bytes: int | None  # the server's WAL position minus confirmed_flush_lsn
    retained_bytes: int | None  # WAL kept for the slot: the server's position minus restart_lsn
    wal_status: str | None


class Cursor(Protocol):
    """A psycopg2 cursor, or a psycopg 3 one with tuple rows."""

    def execute(self, query: str, params: tuple[str, ...]) -> Any: ...

    def fetchone(self) -> Sequence[Any] | None: ...


def find(cursor: Cursor, name: str) -> Slot | None:
    cursor.execute(FIND, (name,))
    row = cursor.fetchone()
    return None if row is None else Slot(name, *row)
