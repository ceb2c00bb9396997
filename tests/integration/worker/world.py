"""Test data for the worker: users, follows and posts written with SQL (as the API would), their events, and the
timeline definition of docs/guarantees.md to compare timelines against (with the read-time merge of pulled posts)."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from typing import Any

import pika
import psycopg
from psycopg.types.json import Jsonb

from services.api import sql as api_sql
from services.core import events as ev
from services.core.topology import Topology

Conn = psycopg.Connection[Any]


def add_users(conn: Conn, n: int) -> list[int]:
    start = conn.execute("SELECT coalesce(max(id), 0) FROM users").fetchone()[0]  # type: ignore[index]
    rows = conn.execute(
        "INSERT INTO users (handle, token_hash) "
        "SELECT 'u' || g, sha256(('token' || g)::bytea) FROM generate_series(%s::bigint, %s::bigint) g "
        "RETURNING id", (start + 1, start + n)).fetchall()
    conn.commit()
    return [r[0] for r in rows]


def insert_outbox(conn: Conn, event: ev.Event, trace: str | None = None) -> None:
    """The event's outbox row with the API's own statement, in the open transaction (not committed); `trace`: its
    trace column's text (services/core/tracecontext.py)."""
    conn.execute(api_sql.INSERT_OUTBOX, {"id": event.id, "aggregatetype": event.aggregate_type,
                                         "aggregateid": event.aggregate_id, "type": event.type,
                                         "payload": Jsonb(event.payload), "trace": trace})


def commit_with_outbox(conn: Conn, event: ev.Event) -> ev.Event:
    """The event's outbox row, in the same transaction as the change (as the API writes it), then commit."""
    insert_outbox(conn, event)
    conn.commit()
    return event


def _lock_pair(conn: Conn, follower: int, followee: int) -> None:
    """Both users rows in id order before the follows row, as the api's set_follow does (docs/adr/0152)."""
    conn.execute(api_sql.LOCK_PAIR, {"ids": sorted((follower, followee))})


def follow(conn: Conn, follower: int, followee: int) -> ev.Event:
    _lock_pair(conn, follower, followee)
    conn.execute("INSERT INTO follows (follower_id, followee_id) VALUES (%s, %s)", (follower, followee))
    _count(conn, follower, followee, +1)
    return commit_with_outbox(conn, ev.Event.new(ev.FOLLOW_CREATED, f"{follower}:{followee}",
                                                  {"follower_id": follower, "followee_id": followee}))


def unfollow(conn: Conn, follower: int, followee: int) -> ev.Event:
    _lock_pair(conn, follower, followee)
    conn.execute("DELETE FROM follows WHERE follower_id = %s AND followee_id = %s", (follower, followee))
    _count(conn, follower, followee, -1)
    return commit_with_outbox(conn, ev.Event.new(ev.FOLLOW_DELETED, f"{follower}:{followee}",
                                                  {"follower_id": follower, "followee_id": followee}))


def _count(conn: Conn, follower: int, followee: int, delta: int) -> None:
    conn.execute("UPDATE users SET follower_count = follower_count + %s WHERE id = %s", (delta, followee))
    conn.execute("UPDATE users SET following_count = following_count + %s WHERE id = %s", (delta, follower))


def followers_in_bulk(conn: Conn, followee: int, followers: list[int]) -> None:
    conn.execute("INSERT INTO follows (follower_id, followee_id) SELECT unnest(%s::bigint[]), %s",
                 (followers, followee))
    conn.execute("UPDATE users SET follower_count = follower_count + %s WHERE id = %s", (len(followers), followee))
    conn.execute("UPDATE users SET following_count = following_count + 1 WHERE id = ANY(%s)", (followers,))
    conn.commit()


def post(conn: Conn, author: int) -> ev.Event:
    post_id = conn.execute("INSERT INTO posts (author_id, body) VALUES (%s, 'hello') RETURNING id",
                           (author,)).fetchone()[0]  # type: ignore[index]
    return commit_with_outbox(conn, ev.Event.new(ev.POST_CREATED, post_id, {"post_id": post_id, "author_id": author}))


def delete_post(conn: Conn, post_id: int, author: int) -> ev.Event:
    conn.execute("UPDATE posts SET deleted_at = now() WHERE id = %s", (post_id,))
    return commit_with_outbox(conn, ev.Event.new(ev.POST_DELETED, post_id, {"post_id": post_id, "author_id": author}))


def publish(channel: pika.adapters.blocking_connection.BlockingChannel, topology: Topology,
            events: Iterable[ev.Event]) -> None:
    for event in events:
        channel.basic_publish(topology.grouped_exchange, event.type, ev.encode(event), pika.BasicProperties(
            message_id=str(event.id), type=event.type, content_type=ev.CONTENT_TYPE, delivery_mode=2))


def twice_shuffled(events: list[ev.Event], rng: random.Random) -> list[ev.Event]:
    doubled = events + events
    rng.shuffle(doubled)
    return doubled


def definition(conn: Conn, user: int) -> list[int]:
    """The timeline definition (docs/guarantees.md): the posts of every account the user follows and the user's
    own, not deleted."""
    return sorted(r[0] for r in conn.execute(
        "SELECT p.id FROM posts p WHERE p.deleted_at IS NULL AND (p.author_id = %(u)s OR p.author_id IN "
        "(SELECT followee_id FROM follows WHERE follower_id = %(u)s))", {"u": user}))


def merged(conn: Conn, user: int) -> list[int]:
    """What a read serves: materialized rows at or above the floor + pulled posts + below the floor from source."""
    floor = conn.execute("SELECT timeline_floor FROM users WHERE id = %s", (user,)).fetchone()[0]  # type: ignore[index]
    rows = [r[0] for r in conn.execute(
        "SELECT post_id FROM timelines WHERE user_id = %s AND post_id >= %s", (user, floor))]
    pulled = [r[0] for r in conn.execute(  # the followees': the user's own are among his rows (docs/adr/0157)
        "SELECT p.id FROM posts p WHERE p.fanned_out = false AND p.deleted_at IS NULL AND p.id >= %(f)s AND "
        "p.author_id IN (SELECT followee_id FROM follows WHERE follower_id = %(u)s)", {"u": user, "f": floor})]
    below = [p for p in definition(conn, user) if p < floor]
    return sorted(rows + pulled + below)


def problems(conn: Conn) -> list[str]:
    """Every user's merged timeline against the definition; stray rows anywhere; undecided live posts."""
    found = []
    for (user,) in conn.execute("SELECT id FROM users ORDER BY id").fetchall():
        want, got = definition(conn, user), merged(conn, user)
        if want != got:
            found.append(f"user {user}: missing {sorted(set(want) - set(got))}, extra {sorted(set(got) - set(want))}"
                         f", twice {sorted({p for p in got if got.count(p) > 1})}")
    stray = conn.execute(
        "SELECT t.user_id, t.post_id FROM timelines t JOIN posts p ON p.id = t.post_id "
        "WHERE p.deleted_at IS NOT NULL OR NOT (p.author_id = t.user_id OR EXISTS (SELECT 1 FROM follows f "
        "WHERE f.follower_id = t.user_id AND f.followee_id = p.author_id)) LIMIT 5").fetchall()
    if stray:
        found.append(f"stray rows {stray}")
    undecided = conn.execute("SELECT id FROM posts WHERE fanned_out IS NULL AND deleted_at IS NULL").fetchall()
    if undecided:
        found.append(f"undecided posts {undecided}")
    # every unfollow processed: no pending pair left (db/init/022)
    pending = conn.execute("SELECT follower_id, followee_id FROM timeline_unfollows LIMIT 5").fetchall()
    if pending:
        found.append(f"unfollows still pending {pending}")
    conn.rollback()
    return found


def publish_groups(channel: pika.adapters.blocking_connection.BlockingChannel, topology: Topology,
                   events: list[ev.Event], size: int, rng: random.Random,
                   traceparent: Callable[[ev.Event], str] = lambda _e: "") -> None:
    """`events` as groups (docs/events.md "Groups") of at most `size` events of one type, the groups in random
    order (`size` 1: one message an event, in their order); with `traceparent`, each event's context."""
    if size == 1:
        for event in events:
            context = traceparent(event)
            channel.basic_publish(topology.grouped_exchange, event.type, ev.encode(event), pika.BasicProperties(
                message_id=str(event.id), type=event.type, content_type=ev.CONTENT_TYPE, delivery_mode=2,
                headers={"traceparent": context} if context else None))
        return
    by_type: dict[str, list[ev.Event]] = {}
    for event in events:
        by_type.setdefault(event.type, []).append(event)
    groups = [same[i:i + size] for same in by_type.values() for i in range(0, len(same), size)]
    rng.shuffle(groups)
    for group in groups:
        contexts = [traceparent(e) for e in group]
        headers = {ev.TRACEPARENTS_HEADER: contexts} if any(contexts) else None
        channel.basic_publish(topology.grouped_exchange, group[0].type, ev.encode_group([ev.encode(e) for e in group]),
                              pika.BasicProperties(message_id=str(group[0].id), type=group[0].type,
                                                   content_type=ev.GROUP_CONTENT_TYPE, delivery_mode=2,
                                                   headers=headers))
