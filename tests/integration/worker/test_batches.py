"""Batches (docs/adr/0024) against real Postgres and RabbitMQ: mixed events in one batch and across batches in
shuffled order converge; a poison message and forged events reach the dead queue alone, with their reasons."""

from __future__ import annotations

import random
import signal
import threading
from typing import Any

import pika
import psycopg
import pytest
from pika.adapters.blocking_connection import BlockingChannel as Channel
from psycopg_pool import ConnectionPool

from services.consumer import broker, headers, outcomes
from services.consumer.messages import Message
from services.consumer.processor import Processor
from services.consumer.retry import RetryPolicy
from services.core import events as ev
from services.core.db import make_pool
from services.core.topology import Topology
from services.worker.fanout import Effects
from testkit.processes import Processes
from testkit.waiting import eventually
from tests.integration.worker import world
from tests.integration.worker.conftest import WORKER_ENV, dead_letters
from tests.integration.worker.test_worker_process import _settle_and_stop

pytestmark = pytest.mark.integration

Conn = psycopg.Connection[Any]


def mixed_events(db: Conn) -> tuple[list[ev.Event], int]:
    """A post created and deleted, a follow and unfollow of one pair, another follow with posts, and a live post.
    Returns the events and the live post's id."""
    author, fan, other = world.add_users(db, 3)
    world.follow(db, other, author)
    created = world.post(db, author)
    deleted = world.delete_post(db, created.payload["post_id"], author)
    followed, unfollowed = world.follow(db, fan, author), world.unfollow(db, fan, author)
    live = world.post(db, author)
    again = world.follow(db, fan, other)
    return [created, deleted, followed, unfollowed, live, again, world.post(db, other)], live.payload["post_id"]


def poison() -> ev.Event:
    """Decodes, but no statement can take it: an author id beyond bigint fails the batch's transaction."""
    return ev.Event.new(ev.POST_CREATED, 1, {"post_id": 1, "author_id": 2**63})


def poison_and_forgeries(db: Conn, events: list[ev.Event], live_post: int) -> list[ev.Event]:
    """The poison, a post.deleted for a live post that no transaction wrote, and a real event's id (mixed_events'
    live post) with another type."""
    live_author = db.execute("SELECT author_id FROM posts WHERE id = %s", (live_post,)).fetchone()[0]  # type: ignore[index]
    forged_delete = ev.Event.new(ev.POST_DELETED, live_post, {"post_id": live_post, "author_id": live_author})
    real = events[4]
    mismatched = ev.Event(real.id, ev.POST_DELETED, real.aggregate_type, real.aggregate_id, real.occurred_at,
                          real.payload)
    return [poison(), forged_delete, mismatched]


def test_one_batch_of_mixed_events_and_a_poison_converges_and_fails_the_poison_alone(
        db: Conn, database_url: str) -> None:
    events, _ = mixed_events(db)
    rng = random.Random(3)
    batch = [*events, *events, poison()]  # every event twice: duplicates inside the batch
    rng.shuffle(batch)
    pool: ConnectionPool = make_pool(database_url, max_size=2, name="test-batch")
    pool.open()
    try:
        effects = Effects(pool, 10_000)
        processor = Processor(effects.apply, RetryPolicy(3, 0.05, 0.1), large=effects.fan_out_large)
        results = processor.batch([Message(ev.encode(e), None) for e in batch])
    finally:
        pool.close()
    failed = {r.event_id for r in results if not isinstance(r.outcome, outcomes.Ack)}
    assert failed == {str(e.id) for e in batch if e.payload.get("author_id") == 2**63}
    assert world.problems(db) == []


def test_a_forgery_reusing_a_real_events_id_in_the_same_batch_fails_alone(db: Conn, database_url: str) -> None:
    author, fan = world.add_users(db, 2)
    world.follow(db, fan, author)
    real = world.post(db, author)
    forged = ev.Event(real.id, ev.POST_DELETED, real.aggregate_type, real.aggregate_id, real.occurred_at,
                      real.payload)
    pool: ConnectionPool = make_pool(database_url, max_size=1, name="test-batch")
    pool.open()
    try:
        done = Effects(pool, 10_000).apply([forged, real])
    finally:
        pool.close()
    assert done[real] == "pushed" and str(done[forged]).startswith("not in outbox")
    assert world.merged(db, fan) == [real.payload["post_id"]]


@pytest.mark.e2e
def test_a_full_dead_queue_refuses_letters_and_the_worker_parks_them_instead_of_losing_them(
        channel: Channel, topology: Topology, processes: Processes) -> None:
    channel.queue_delete(topology.dead_queue)
    broker.declare(channel, topology.fanout, dead_max_length=1)
    bodies = [b"{not json 1", b"{not json 2"]
    for body in bodies:
        channel.basic_publish(topology.grouped_exchange, "post.created", body, pika.BasicProperties(delivery_mode=2))
    worker = processes.start("worker", "worker", env={**WORKER_ENV, "WALFEED_WORKER_DEAD_MAX_LENGTH": "1"})
    eventually(lambda: "dead queue full" in worker.log(), what="the second letter refused and parked")
    letters: list[tuple[pika.BasicProperties, bytes]] = []

    def both_dead() -> bool:  # taking the first letter frees the room the parked one comes back to
        letters.extend(dead_letters(channel, topology))
        return len(letters) >= 2

    eventually(both_dead, timeout=30, what="the parked letter dead-lettered once there is room")
    assert sorted(body for _, body in letters) == bodies
    assert all(str(p.headers[headers.REASON]).startswith("malformed") for p, _ in letters)


@pytest.mark.e2e
def test_a_worker_facing_a_dead_queue_declared_otherwise_stops_with_what_to_do(
        topology: Topology, channel: Channel, processes: Processes) -> None:
    worker = processes.start("worker", "worker", env={**WORKER_ENV, "WALFEED_WORKER_DEAD_MAX_LENGTH": "5"})
    eventually(lambda: not worker.running(), what="the worker exits")
    assert worker.stop(signal.SIGTERM) == 2
    assert "other arguments" in worker.log() and "WALFEED_WORKER_DEAD_MAX_LENGTH" in worker.log()


def test_a_post_another_transaction_decides_meanwhile_keeps_that_decision_and_fans_nothing_out(
        db: Conn, database_url: str) -> None:
    """A transaction records "pull" while the batch, which read the post undecided and proposes "push", waits for
    the row: the batch keeps the recorded decision (read again), inserts no follower's row (only the author's own,
    which every post has: docs/adr/0157), and says so."""
    author, fan = world.add_users(db, 2)
    world.follow(db, fan, author)
    created = world.post(db, author)
    post_id = created.payload["post_id"]
    pool: ConnectionPool = make_pool(database_url, max_size=1, name="test-race")
    pool.open()
    done: dict[ev.Event, object] = {}
    with psycopg.connect(database_url) as racer, psycopg.connect(database_url, autocommit=True) as watch:
        racer.execute("UPDATE posts SET fanned_out = false WHERE id = %s", (post_id,))
        worker = threading.Thread(target=lambda: done.update(Effects(pool, 10_000).apply([created])))
        worker.start()
        eventually(lambda: watch.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                                         "AND wait_event_type = 'Lock'").fetchone() == (1,),
                   timeout=30, what="the batch waiting for the post's row")
        racer.commit()
    worker.join(30)
    pool.close()
    assert done == {created: "pulled"}
    assert db.execute("SELECT fanned_out FROM posts WHERE id = %s", (post_id,)).fetchone() == (False,)
    assert db.execute("SELECT user_id FROM timelines WHERE post_id = %s", (post_id,)).fetchall() == [(author,)]


@pytest.mark.e2e
@pytest.mark.parametrize(("batch_size", "group"), [("3", 1), ("500", 1), ("3", 4), ("500", 4)])
def test_shuffled_duplicated_batches_converge_and_only_poison_and_forgeries_are_dead(
        batch_size: str, group: int, db: Conn, channel: Channel, topology: Topology, processes: Processes) -> None:
    """Every event twice, shuffled, with a poison and two forgeries, one event a message or in groups of up to 4
    events of one type (docs/adr/0095): each event is judged on its own, and a dead letter is that event alone, as a
    message of its own would carry it, with its own trace context."""
    events, live_post = mixed_events(db)
    bad = poison_and_forgeries(db, events, live_post)
    rng = random.Random(int(batch_size) + group)
    traced = {e.id: f"00-{e.id.hex}-{'1' * 16}-01" for e in bad}
    world.publish_groups(channel, topology, [*world.twice_shuffled(events, rng), *bad], group, rng,
                         lambda e: traced.get(e.id, ""))
    processes.start("worker", "worker", env={**WORKER_ENV, "WALFEED_WORKER_BATCH_SIZE": batch_size})
    letters: list[tuple[pika.BasicProperties, bytes]] = []

    def three_dead() -> bool:
        letters.extend(dead_letters(channel, topology))
        return len(letters) >= 3

    eventually(three_dead, timeout=60, what="poison and forgeries dead-lettered")
    by_body = {body: p for p, body in letters}
    assert set(by_body) == {ev.encode(e) for e in bad}
    for event in bad:
        props = by_body[ev.encode(event)]
        assert (props.message_id, props.type, props.content_type) == (str(event.id), event.type, ev.CONTENT_TYPE)
        assert props.headers["traceparent"] == traced[event.id]
        assert ev.TRACEPARENTS_HEADER not in props.headers
    poisoned, forged_delete, mismatched = (str(by_body[ev.encode(e)].headers[headers.REASON]) for e in bad)
    assert poisoned.startswith("attempts exhausted: NumericValueOutOfRange")
    assert forged_delete.startswith("attempts exhausted: NotVisibleYet: not in outbox")
    assert mismatched.startswith("not in outbox: post.deleted")
    _settle_and_stop(processes, channel, topology)
    assert world.problems(db) == []
    assert db.execute("SELECT count(*) FROM timelines WHERE post_id = %s", (live_post,)).fetchone()[0] == 2  # type: ignore[index]
    assert dead_letters(channel, topology) == []


@pytest.mark.e2e
def test_a_large_post_in_a_group_is_fanned_out_alone_and_its_neighbours_in_the_batch(
        db: Conn, channel: Channel, topology: Topology, processes: Processes) -> None:
    author, small, *fans = world.add_users(db, 1_502)
    world.followers_in_bulk(db, author, fans)  # 1,500 followers: more than a batch fans out itself
    world.follow(db, fans[0], small)
    posts = [world.post(db, small), world.post(db, author), world.post(db, small)]
    world.publish_groups(channel, topology, posts, 3, random.Random(1))
    processes.start("worker", "worker", env={**WORKER_ENV, "WALFEED_CELEBRITY_THRESHOLD": "100000"})
    _settle_and_stop(processes, channel, topology)
    counts = {p.payload["post_id"]: db.execute("SELECT count(*) FROM timelines WHERE post_id = %s",
                                               (p.payload["post_id"],)).fetchone()[0] for p in posts}  # type: ignore[index]
    assert counts == {posts[0].payload["post_id"]: 2, posts[1].payload["post_id"]: 1_501,
                      posts[2].payload["post_id"]: 2}
    assert world.problems(db) == []
    assert dead_letters(channel, topology) == []


@pytest.mark.e2e
def test_a_malformed_group_is_dead_lettered_whole_with_the_reason(
        channel: Channel, topology: Topology, processes: Processes) -> None:
    channel.basic_publish(topology.grouped_exchange, "post.created", b'{"not": "an array"}', pika.BasicProperties(
        message_id="g1", content_type=ev.GROUP_CONTENT_TYPE, delivery_mode=2))
    processes.start("worker", "worker", env=WORKER_ENV)
    letters: list[tuple[pika.BasicProperties, bytes]] = []

    def dead() -> bool:
        letters.extend(dead_letters(channel, topology))
        return bool(letters)

    eventually(dead, what="a dead letter")
    [(props, body)] = letters
    assert body == b'{"not": "an array"}' and props.content_type == ev.GROUP_CONTENT_TYPE
    assert props.headers[headers.REASON] == "malformed: a group's body must be a non-empty JSON array"
