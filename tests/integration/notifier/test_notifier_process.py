"""`walfeed notifier` as a real process against real Postgres and RabbitMQ: duplicated and reordered events give
each notification once, with its deliveries and their events once; a deleted post withdraws its mentions."""

from __future__ import annotations

import random
import signal
from typing import Any

import psycopg
import pytest
from pika.adapters.blocking_connection import BlockingChannel as Channel

from services.core import events as ev
from services.core.topology import Topology
from services.notifier.mentions import MAX_MENTIONS
from testkit.processes import Processes
from testkit.waiting import eventually
from tests.integration.notifier.conftest import NOTIFIER_ENV, depth, drained
from tests.integration.worker import world

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

Conn = psycopg.Connection[Any]


def _handles(db: Conn, users: list[int]) -> dict[int, str]:
    handles = {r[0]: r[1] for r in db.execute("SELECT id, handle FROM users WHERE id = ANY(%s)", (users,))}
    db.rollback()
    return handles


def _post(db: Conn, author: int, body: str) -> ev.Event:
    post_id = db.execute("INSERT INTO posts (author_id, body) VALUES (%s, %s) RETURNING id",
                         (author, body)).fetchone()[0]  # type: ignore[index]
    return world.commit_with_outbox(db, ev.Event.new(ev.POST_CREATED, post_id,
                                                     {"post_id": post_id, "author_id": author}))


def _webhook(db: Conn, owner: int, kinds: list[str]) -> int:
    webhook_id = db.execute("INSERT INTO webhooks (owner_id, url, events, secret) VALUES "
                            "(%s, 'https://example.com/hook', %s, 'whsec_dGVzdA==') RETURNING id",
                            (owner, kinds)).fetchone()[0]  # type: ignore[index]
    db.commit()
    return int(webhook_id)


def _processed(db: Conn) -> int:
    count = db.execute("SELECT count(*) FROM processed_events WHERE consumer = 'notifier'").fetchone()[0]  # type: ignore[index]
    db.rollback()
    return int(count)


def _notifications(db: Conn) -> list[tuple[int, str, int, int | None, bool]]:
    rows = db.execute("SELECT recipient_id, kind, actor_id, post_id, withdrawn_at IS NOT NULL FROM notifications "
                      "ORDER BY 1, 2, 4").fetchall()
    db.rollback()
    return [tuple(r) for r in rows]


def _settle(processes: Processes, db: Conn, channel: Channel, topology: Topology, events: int) -> None:
    """Every distinct event processed and the notifier's queues empty; then the notifier stops cleanly."""
    eventually(lambda: _processed(db) == events and drained(channel, topology), timeout=60,
               what=f"{events} events processed by the notifier")
    for proc in processes.all:
        assert proc.stop(signal.SIGTERM) == 0, proc.log()


def test_duplicated_and_reordered_events_notify_each_mention_once_with_its_deliveries(
        db: Conn, channel: Channel, topology: Topology, processes: Processes) -> None:
    users = world.add_users(db, 14)
    alice, bob, carol, dave = users[:4]
    h = _handles(db, users)
    bob_hook = _webhook(db, bob, ["mention"])
    _webhook(db, carol, ["follow"])  # carol's webhook takes follows only: her mention is in-app only
    db.execute("UPDATE users SET email = 'bob@example.com', email_kinds = '{mention}', email_verified_at = now() "
               "WHERE id = %s", (bob,))
    # carol's address is not verified: her mention gets no mail delivery
    db.execute("UPDATE users SET email = 'carol@example.com', email_kinds = '{mention}' WHERE id = %s", (carol,))
    db.commit()

    p1 = _post(db, alice, f"hi @{h[bob]} and @{h[carol].upper()}, @{h[bob]} again; @nobody_here, mail@{h[dave]}")
    p2 = _post(db, alice, f"@{h[alice]} @{h[bob]} soon deleted")
    deleted = world.delete_post(db, p2.payload["post_id"], alice)
    crowd = users[1:]  # 13 users named: only the first MAX_MENTIONS are notified
    p3 = _post(db, alice, " ".join(f"@{h[u]}" for u in crowd))
    follow = world.follow(db, dave, alice)
    unfollow = world.unfollow(db, dave, alice)
    events = [p1, p3, follow, unfollow, p2]
    shuffled = world.twice_shuffled(events, random.Random(15))
    world.publish(channel, topology, [deleted, *shuffled])  # the deletion first: p2 was never seen created

    processes.start("notifier", "notifier", env={**NOTIFIER_ENV, "WALFEED_NOTIFIER_CONCURRENCY": "2"})
    _settle(processes, db, channel, topology, len(events) + 1)

    p1_id, p3_id = p1.payload["post_id"], p3.payload["post_id"]
    want = sorted([(bob, "mention", alice, p1_id, False), (carol, "mention", alice, p1_id, False),
                   (alice, "follow", dave, None, False),
                   *((u, "mention", alice, p3_id, False) for u in crowd[:MAX_MENTIONS])],
                  key=lambda r: (r[0], r[1], r[3] or 0))
    assert _notifications(db) == want
    deliveries = db.execute(
        "SELECT d.id, d.channel, d.webhook_id, n.post_id, d.status FROM deliveries d "
        "JOIN notifications n ON n.id = d.notification_id ORDER BY n.post_id, d.channel").fetchall()
    assert [tuple(r[1:]) for r in deliveries] == [("email", None, p1_id, "PENDING"),
                                                  ("webhook", bob_hook, p1_id, "PENDING"),
                                                  ("email", None, p3_id, "PENDING"),
                                                  ("webhook", bob_hook, p3_id, "PENDING")]
    outbox = db.execute("SELECT type, payload FROM outbox WHERE aggregatetype = 'delivery' ORDER BY 2").fetchall()
    assert sorted((t, p["delivery_id"]) for t, p in outbox) == sorted(
        (f"delivery.{r[1]}", r[0]) for r in deliveries)
    assert depth(channel, topology.notifier.dead_queue) == 0


def test_a_deleted_post_withdraws_its_mentions_and_their_undelivered_deliveries(
        db: Conn, channel: Channel, topology: Topology, processes: Processes) -> None:
    alice, bob, carol = world.add_users(db, 3)
    h = _handles(db, [bob, carol])
    _webhook(db, bob, ["mention"])
    _webhook(db, carol, ["mention"])
    created = _post(db, alice, f"@{h[bob]} @{h[carol]}")
    world.publish(channel, topology, [created])
    processes.start("notifier", "notifier", env=NOTIFIER_ENV)
    eventually(lambda: _processed(db) == 1, timeout=60, what="post.created processed")
    db.execute("UPDATE deliveries SET status = 'DELIVERED' WHERE recipient_id = %s", (bob,))  # bob's went out
    deleted = world.delete_post(db, created.payload["post_id"], alice)
    world.publish(channel, topology, [deleted, deleted])
    _settle(processes, db, channel, topology, 2)

    assert [(r[0], r[4]) for r in _notifications(db)] == [(bob, True), (carol, True)]
    statuses = db.execute("SELECT recipient_id, status FROM deliveries ORDER BY 1").fetchall()
    assert [tuple(r) for r in statuses] == [(bob, "DELIVERED"), (carol, "WITHDRAWN")]


def test_a_notifier_killed_mid_stream_and_restarted_notifies_each_mention_once(
        db: Conn, channel: Channel, topology: Topology, processes: Processes) -> None:
    users = world.add_users(db, 6)
    author, *named = users
    h = _handles(db, named)
    _webhook(db, named[0], ["mention"])
    body = " ".join(f"@{h[u]}" for u in named)
    posts = [_post(db, author, body) for _ in range(300)]
    world.publish(channel, topology, posts)
    notifier = processes.start("notifier", "notifier", env={**NOTIFIER_ENV, "WALFEED_NOTIFIER_BATCH_SIZE": "3",
                                                            "WALFEED_NOTIFIER_CONCURRENCY": "1"})
    eventually(lambda: _processed(db) >= 10, timeout=60, what="some posts processed")
    notifier.kill()  # SIGKILL: unacked messages go back to the queue, committed batches stay
    assert _processed(db) < len(posts), "the notifier finished before it could be killed"
    notifier.start()
    _settle(processes, db, channel, topology, len(posts))

    counts = db.execute("SELECT count(*), count(DISTINCT (post_id, recipient_id)) FROM notifications").fetchone()
    assert counts == (len(posts) * len(named), len(posts) * len(named))
    deliveries = db.execute("SELECT count(*), count(DISTINCT notification_id) FROM deliveries").fetchone()
    events = db.execute("SELECT count(*) FROM outbox WHERE type = 'delivery.webhook'").fetchone()
    assert deliveries == (len(posts), len(posts)) and events == (len(posts),)
    db.rollback()


def test_an_author_over_its_delivery_budget_notifies_in_app_only(
        db: Conn, channel: Channel, topology: Topology, processes: Processes) -> None:
    users = world.add_users(db, 6)
    alice, eve, named = users[0], users[1], users[2:5]
    h = _handles(db, users)
    for user in named:  # three targets each: two webhooks and an email address
        _webhook(db, user, ["mention"])
        _webhook(db, user, ["mention"])
    db.execute("UPDATE users SET email = 'x@example.com', email_kinds = '{mention}', email_verified_at = now() "
               "WHERE id = ANY(%s)", (named,))  # verified: only verified addresses are mailed (ADR 0106)
    db.commit()
    first = _post(db, alice, " ".join(f"@{h[u]}" for u in named))  # 9 targets, a budget of 5
    world.publish(channel, topology, [first])
    processes.start("notifier", "notifier", env={**NOTIFIER_ENV, "WALFEED_NOTIFIER_AUTHOR_DELIVERIES": "5"})
    eventually(lambda: _processed(db) == 1, timeout=60, what="the first post processed")
    second = _post(db, alice, f"@{h[named[0]]} again")  # alice's budget is spent in this window
    other = _post(db, eve, f"@{h[named[0]]} from eve")  # eve has her own
    world.publish(channel, topology, [second, other])
    _settle(processes, db, channel, topology, 3)

    rows = db.execute("SELECT n.post_id, count(d.id) FROM notifications n LEFT JOIN deliveries d "
                      "ON d.notification_id = n.id GROUP BY n.id, n.post_id ORDER BY n.post_id, n.id").fetchall()
    db.rollback()
    by_post: dict[int, list[int]] = {}
    for post_id, count in rows:
        by_post.setdefault(post_id, []).append(int(count))
    posts = [e.payload["post_id"] for e in (first, second, other)]
    assert sorted(by_post) == sorted(posts)  # every notification is written
    assert len(by_post[posts[0]]) == 3 and sum(by_post[posts[0]]) == 5  # its deliveries stop at the budget
    assert by_post[posts[1]] == [0] and by_post[posts[2]] == [3]
    outbox = db.execute("SELECT count(*) FROM outbox WHERE aggregatetype = 'delivery'").fetchone()
    db.rollback()
    assert outbox is not None and outbox[0] == 8  # one event per delivery made, none for those withheld
