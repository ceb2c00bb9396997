"""The replication stream: psycopg2's LogicalReplicationConnection on the slot, wal2json v2 (thin adapter).

psycopg 3 has no replication protocol support, hence psycopg2 here and only here (docs/adr/0002).
"""

from __future__ import annotations

import contextlib
import logging

import psycopg2
import psycopg2.errors
import psycopg2.extras

from services.cdc_relay import wal2json
from services.core import slots

log = logging.getLogger(__name__)

# The replication session's settings: wal2json prints values with them (the forms wal2json.fast_insert reads).
SESSION = "SET TimeZone TO 'UTC'; SET DateStyle TO 'ISO, YMD'"

# Every error of the replication connection (psycopg2's base class: InterfaceError and DatabaseError): lost,
# refused, or the walsender ended the session with an error. The session is over: open a new one with backoff.
ReplicationError = psycopg2.Error


class SlotMissing(Exception):
    """The slot does not exist. Not the relay's to create: `walfeed migrate` does (before any event is written)."""


class SlotBusy(Exception):
    """Another walsender (another relay) streams the slot: stand by."""


class Interrupted(Exception):
    """A stop was requested while the stream was being prepared (failover.Recovery): stop, do not retry."""


class ReplicationStream:
    def __init__(self, conn: psycopg2.extras.LogicalReplicationConnection, start_lsn: int) -> None:
        self._conn = conn
        self._cur = conn.cursor()
        self.start_lsn = start_lsn
        # The next message (its `payload` is bytes: decode=False), or None when nothing is buffered (wait on
        # fileno). Non-blocking. The cursor's own method: the relay's read loop calls it once per message.
        self.read_message = self._cur.read_message

    @classmethod
    def open(cls, database_url: str, slot: str, status_interval: float) -> ReplicationStream:
        conn = psycopg2.connect(database_url, connection_factory=psycopg2.extras.LogicalReplicationConnection,
                                connect_timeout=5, application_name="walfeed-relay")
        try:
            found = slots.find(conn.cursor(), slot)
            if found is None:
                raise SlotMissing(slot)
            stream = cls(conn, wal2json.parse_lsn(found.confirmed_flush_lsn or ""))
            stream._start(slot, status_interval)
            return stream
        except psycopg2.errors.ObjectInUse as exc:
            conn.close()
            raise SlotBusy(str(exc).strip()) from None
        except psycopg2.errors.UndefinedObject:
            conn.close()
            raise SlotMissing(slot) from None
        except BaseException:
            conn.close()
            raise

    def _start(self, slot: str, status_interval: float) -> None:
        # wal2json prints values with the session's settings: the canonical forms the parser's fast path expects
        # (any other form still parses, through the slower reference path).
        self._cur.execute(SESSION)
        # start_lsn 0: the server resumes after the slot's confirmed_flush_lsn, resending everything not confirmed.
        self._cur.start_replication(slot_name=slot, decode=False, options=wal2json.OPTIONS,
                                    status_interval=status_interval)

    def fileno(self) -> int:
        return int(self._conn.fileno())

    @property
    def wal_end(self) -> int:
        """The server's position from the last message or keepalive."""
        return int(self._cur.wal_end)

    def feedback(self, lsn: int) -> None:
        """Status update: written and flushed up to `lsn` (the slot's confirmed_flush_lsn becomes `lsn`)."""
        self._cur.send_feedback(write_lsn=lsn, flush_lsn=lsn, force=True)

    def close(self) -> None:
        with contextlib.suppress(psycopg2.Error):
            self._conn.close()
