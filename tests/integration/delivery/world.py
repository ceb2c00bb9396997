"""Rows the notifier writes, written directly: users, webhooks, notifications, deliveries and their
`delivery.*` outbox events in one transaction (docs/notifications.md)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import psycopg.rows
import psycopg.sql
from psycopg.types.json import Jsonb

from services.core import events as ev

Conn = psycopg.Connection[Any]


def user(conn: Conn, handle: str, email: str | None = None, email_kinds: tuple[str, ...] = (), *,
         verified: bool = True) -> int:
    """A user; an `email` is verified unless `verified` is False (db/init/017_email_verification.sql)."""
    row = conn.execute("INSERT INTO users (handle, token_hash, email, email_kinds, email_verified_at) "
                       "VALUES (%s, sha256(%s::bytea), %s, %s, CASE WHEN %s THEN now() END) RETURNING id",
                       (handle, handle.encode(), email, list(email_kinds), verified and email is not None)).fetchone()
    conn.commit()
    assert row is not None
    return int(row[0])


def webhook(conn: Conn, owner: int, url: str, secret: str, previous: str | None = None) -> int:
    until = datetime.now(UTC) + timedelta(hours=1) if previous else None
    row = conn.execute("INSERT INTO webhooks (owner_id, url, events, secret, previous_secret, previous_secret_until) "
                       "VALUES (%s, %s, '{follow,mention}', %s, %s, %s) RETURNING id",
                       (owner, url, secret, previous, until)).fetchone()
    conn.commit()
    assert row is not None
    return int(row[0])


def notify(conn: Conn, recipient: int, actor: int, *, webhook_id: int | None = None, email: bool = False,
           kind: str = "follow", post_id: int | None = None, commit: bool = True) -> int:
    """A notification and one delivery (to the webhook, or by email) with its outbox event; the delivery id.
    `commit=False`: in the caller's transaction, so that several reach the relay, and the worker, together."""
    notification = conn.execute(
        "INSERT INTO notifications (recipient_id, kind, actor_id, post_id, event_id) "
        "VALUES (%s, %s, %s, %s, gen_random_uuid()) RETURNING id", (recipient, kind, actor, post_id)).fetchone()
    assert notification is not None
    channel = "email" if email else "webhook"
    delivery = conn.execute(
        "INSERT INTO deliveries (notification_id, channel, webhook_id, recipient_id) VALUES (%s, %s, %s, %s) "
        "RETURNING id", (notification[0], channel, webhook_id, recipient)).fetchone()
    assert delivery is not None
    event = ev.Event.new(f"delivery.{channel}", delivery[0], {"delivery_id": delivery[0]})
    conn.execute("INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES (%s, %s, %s, %s, %s)",
                 (event.id, event.aggregate_type, event.aggregate_id, event.type, Jsonb(event.payload)))
    if commit:
        conn.commit()
    return int(delivery[0])


def _row(conn: Conn, table: str, row_id: int) -> dict[str, Any]:
    query = psycopg.sql.SQL("SELECT * FROM {} WHERE id = %s").format(psycopg.sql.Identifier(table))
    with conn.cursor(row_factory=psycopg.rows.dict_row) as cur:
        row = cur.execute(query, (row_id,)).fetchone()
    conn.commit()
    assert row is not None
    return row


def delivery(conn: Conn, delivery_id: int) -> dict[str, Any]:
    return _row(conn, "deliveries", delivery_id)


def webhook_row(conn: Conn, webhook_id: int) -> dict[str, Any]:
    return _row(conn, "webhooks", webhook_id)
