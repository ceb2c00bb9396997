"""`walfeed prune-notifications` against a real database (docs/adr/0100): settled deliveries older than the
duration go, and read or withdrawn notifications older than it once they have no delivery left; nothing under way,
unread or recent goes."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
import pytest

from services.core import retention
from tests.integration.delivery import world
from tests.integration.ops.conftest import Walfeed

pytestmark = pytest.mark.integration

Db = psycopg.Connection[Any]
OLD = "now() - interval '40 days'"


def _world(db: Db) -> tuple[dict[str, int], dict[str, int]]:
    """Deliveries and notifications of every kind retention tells apart: ({name: delivery id}, {name: notification
    id}). The reader has read up to their last notification; the other recipient has read nothing."""
    reader, other, actor = world.user(db, "reader"), world.user(db, "other"), world.user(db, "actor")
    hooks = {user: world.webhook(db, user, "https://example.com/hook", "whsec_AAAA") for user in (reader, other)}
    made = {name: world.notify(db, user, actor, webhook_id=hooks[user]) for name, user in [
        ("read_delivered", reader), ("read_dead", reader), ("read_retrying", reader), ("unread_delivered", other),
        ("withdrawn_unread", other), ("recent", reader)]}
    for name, status in [("read_delivered", "DELIVERED"), ("read_dead", "DEAD"), ("read_retrying", "RETRYING"),
                         ("recent", "DELIVERED"), ("unread_delivered", "DELIVERED"),
                         ("withdrawn_unread", "WITHDRAWN")]:
        db.execute("UPDATE deliveries SET status = %s WHERE id = %s", (status, made[name]))
    notes = {name: int(db.execute("SELECT notification_id FROM deliveries WHERE id = %s",  # type: ignore[index]
                                  (delivery,)).fetchone()[0]) for name, delivery in made.items()}
    old = [made[n] for n in made if n != "recent"]
    db.execute(f"UPDATE deliveries SET updated_at = {OLD} WHERE id = ANY(%s)", (old,))
    db.execute(f"UPDATE notifications SET created_at = {OLD} WHERE id = ANY(%s)", ([notes[n] for n in made
                                                                                    if n != "recent"],))
    db.execute(f"UPDATE notifications SET withdrawn_at = {OLD} WHERE id = %s", (notes["withdrawn_unread"],))
    db.execute("INSERT INTO notification_reads (user_id, up_to) VALUES (%s, %s)", (reader, notes["recent"]))
    db.commit()
    return made, notes


def _left(db: Db, table: str) -> set[int]:
    ids = {int(r[0]) for r in db.execute(f"SELECT id FROM {table}")}
    db.rollback()
    return ids


def _assert_pruned(db: Db, made: dict[str, int], notes: dict[str, int]) -> None:
    assert _left(db, "deliveries") == {made["read_retrying"], made["recent"]}  # under way, or settled recently
    assert _left(db, "notifications") == {notes["read_retrying"], notes["recent"], notes["unread_delivered"]}


def test_the_command_deletes_settled_deliveries_and_read_notifications_older_than_the_duration(
        walfeed: Walfeed, db: Db) -> None:
    made, notes = _world(db)
    done = walfeed("prune-notifications", "--older-than", "30d")
    assert done.returncode == 0, done.stderr
    assert "deliveries: 4 deleted; notifications: 3 deleted" in done.stdout
    _assert_pruned(db, made, notes)
    again = walfeed("prune-notifications", env={"WALFEED_NOTIFICATION_RETENTION": "30d"})
    assert "deliveries: 0 deleted; notifications: 0 deleted" in again.stdout


def test_batches_of_one_prune_the_same(db: Db, database_url: str) -> None:
    made, notes = _world(db)
    with retention.connect(database_url) as conn:
        pruned = retention.prune_notifications(conn, timedelta(days=30), batch=1)
    assert pruned == retention.PrunedNotifications(4, 3)
    _assert_pruned(db, made, notes)


def test_an_invalid_duration_names_where_it_came_from(walfeed: Walfeed) -> None:
    done = walfeed("prune-notifications", env={"WALFEED_NOTIFICATION_RETENTION": "soon"})
    assert done.returncode == 2 and "WALFEED_NOTIFICATION_RETENTION" in done.stderr
