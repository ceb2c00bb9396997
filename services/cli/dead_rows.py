"""Postgres adapter of `walfeed dead replay` for the delivery channels: a dead delivery made PENDING again, with its
attempts from zero, before its letter is sent back (dead_deliveries.py decides, docs/adr/0070). The statements need
only what the delivery worker's role may do (db/roles/grants.sql)."""

from __future__ import annotations

import contextlib
from typing import Any, Final

import psycopg
from psycopg.rows import dict_row

from services.cli.dead_broker import BrokerError
from services.cli.dead_deliveries import Row

# The row as it was, and whether this statement made it PENDING: only a DEAD delivery whose webhook (if any) is
# enabled, as the api's retry (services/api/sql.py RETRY_DELIVERY) without its outbox event: the replay republishes
# the letter itself.
RESET_DEAD_DELIVERY: Final = """
WITH reset AS (
    UPDATE deliveries d SET status = 'PENDING', attempts = 0, next_attempt_at = NULL, updated_at = clock_timestamp()
    WHERE d.id = %(id)s AND d.status = 'DEAD'
      AND NOT EXISTS (SELECT FROM webhooks w WHERE w.id = d.webhook_id AND w.disabled_at IS NOT NULL)
    RETURNING d.id
)
SELECT d.status, w.disabled_at IS NOT NULL AS disabled, EXISTS (SELECT FROM reset) AS reset
FROM deliveries d LEFT JOIN webhooks w ON w.id = d.webhook_id
WHERE d.id = %(id)s
"""
# The same, changing nothing (--dry-run).
DELIVERY_STATE: Final = """
SELECT d.status, w.disabled_at IS NOT NULL AS disabled, false AS reset
FROM deliveries d LEFT JOIN webhooks w ON w.id = d.webhook_id
WHERE d.id = %(id)s
"""


class RowsError(BrokerError):
    """The database cannot be reached or refused the statement; the message says what to do."""


class DeliveryRows:
    def __init__(self, database_url: str) -> None:
        try:
            self._conn: psycopg.Connection[dict[str, Any]] = psycopg.connect(
                database_url, autocommit=True, row_factory=dict_row, application_name="walfeed-dead")
        except psycopg.Error as exc:
            raise RowsError(f"database unreachable at WALFEED_DATABASE_URL: {exc}".strip()) from None

    def close(self) -> None:
        with contextlib.suppress(psycopg.Error):
            self._conn.close()

    def reset(self, delivery_id: int) -> Row | None:
        """Make the delivery PENDING if it is DEAD (one statement, committed); the row as it was, or None."""
        return self._row(RESET_DEAD_DELIVERY, delivery_id)

    def look(self, delivery_id: int) -> Row | None:
        return self._row(DELIVERY_STATE, delivery_id)

    def _row(self, statement: str, delivery_id: int) -> Row | None:
        try:
            row = self._conn.execute(statement, {"id": delivery_id}).fetchone()
        except psycopg.errors.InsufficientPrivilege as exc:
            raise RowsError(f"the database role may not reset deliveries ({exc.diag.message_primary}): run the "
                            "replay with the delivery worker's WALFEED_DATABASE_URL (docs/operations.md)") from None
        except psycopg.Error as exc:
            raise RowsError(f"the database failed: {exc!r}") from None
        return None if row is None else Row(str(row["status"]), bool(row["disabled"]), bool(row["reset"]))
