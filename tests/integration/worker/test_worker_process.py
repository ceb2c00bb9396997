"""`walfeed worker` as a real process against real Postgres and RabbitMQ: duplicates, reordering, crashes, poison."""

from __future__ import annotations

import functools
import random
import signal
from typing import Any

import orjson
import pika
import psycopg
import pytest
from pika.adapters.blocking_connection import BlockingChannel as Channel

from services.consumer import headers
from services.core import events as ev
from services.core.topology import Topology
from testkit.processes import Process, Processes
from testkit.waiting import eventually
from tests.integration.worker import world
from tests.integration.worker.conftest import WORKER_ENV, dead_letters, drained

pytestmark = [pytest.mark.integration, pytest.mark.e2e]



def _consuming(proc: Process) -> bool:
    """Every start of `proc` reached its consumer (its signal handlers are set by then)."""
    log = proc.log()
    return log.count("session: consuming") >= log.count("--- start")


def _settle_and_stop(processes: Processes, channel: Channel, topology: Topology, timeout: float = 120) -> None:
    """Wait until both queues are empty, then SIGTERM every worker.

    An empty queue is not a finished one: its message count leaves out messages delivered to a worker and not
    acknowledged yet (prefetched), and a stopping worker returns those it has not started. Then the workers start
    again to finish them, and the check repeats: nothing may be left behind when the tests look at the timelines.
    """
    for _ in range(5):
        eventually(lambda: drained(channel, topology), timeout=timeout, what="fanout and retry queues drained")
        stopped = [proc for proc in processes.all if proc.running()]
        for proc in stopped:  # a worker stopped before its handlers are set dies of the signal: let it start first
            eventually(functools.partial(_consuming, proc), timeout=timeout, what=f"{proc.name} consuming")
        for proc in stopped:
            assert proc.stop(signal.SIGTERM) == 0, proc.log()
        if drained(channel, topology):
            return
        for proc in stopped:
            proc.start()
    raise AssertionError("the workers returned messages at every stop")


def test_duplicated_shuffled_events_converge_to_the_definition(
        db: psycopg.Connection[Any], channel: Channel, topology: Topology, processes: Processes) -> None:
    rng = random.Random(20)
    users = world.add_users(db, 16)
    follows: set[tuple[int, int]] = set()
    live_posts: list[tuple[int, int]] = []
    for _ in range(3):
        batch: list[ev.Event] = []
        for _ in range(60):
            action = rng.random()
            a, b = rng.sample(users, 2)
            if action < 0.4 and (a, b) not in follows:
                follows.add((a, b))
                batch.append(world.follow(db, a, b))
            elif action < 0.55 and follows:
                pair = rng.choice(sorted(follows))
                follows.discard(pair)
                batch.append(world.unfollow(db, *pair))
            elif action < 0.9:
                event = world.post(db, a)
                live_posts.append((event.payload["post_id"], a))
                batch.append(event)
            elif live_posts:
                post_id, author = live_posts.pop(rng.randrange(len(live_posts)))
                batch.append(world.delete_post(db, post_id, author))
        world.publish(channel, topology, world.twice_shuffled(batch, rng))
        if len(processes.all) < 2:  # two processes of two threads share the queue; threshold 4 pulls some authors
            processes.start(f"worker{len(processes.all)}", "worker", env={
                **WORKER_ENV, "WALFEED_WORKER_CONCURRENCY": "2", "WALFEED_CELEBRITY_THRESHOLD": "4"})
    _settle_and_stop(processes, channel, topology)
    assert world.problems(db) == []
    assert db.execute("SELECT count(*) FROM posts WHERE fanned_out = false").fetchone()[0] > 0  # type: ignore[index]
    assert dead_letters(channel, topology) == []


@pytest.mark.slow
def test_sigkill_and_sigterm_mid_fanout_then_restart_completes_without_duplicates(
        db: psycopg.Connection[Any], channel: Channel, topology: Topology, processes: Processes) -> None:
    author, *followers = world.add_users(db, 50_001)
    world.followers_in_bulk(db, author, followers)
    posts = [world.post(db, author) for _ in range(3)]
    world.publish(channel, topology, posts)
    total = len(posts) * (len(followers) + 1)

    def rows() -> int:
        n = db.execute("SELECT count(*) FROM timelines").fetchone()[0]  # type: ignore[index]
        db.rollback()
        return int(n)

    env = {**WORKER_ENV, "WALFEED_CELEBRITY_THRESHOLD": "100000"}  # a large audience, still pushed
    worker = processes.start("worker", "worker", env={**env, "WALFEED_WORKER_CONCURRENCY": "1"})
    eventually(lambda: rows() >= 5_000, timeout=60, interval=0.01, what="fan-out under way")
    worker.kill()
    assert rows() < total, "the fan-out finished before the kill: the test proves nothing"
    killed_at = rows()
    second = processes.start("worker2", "worker", env=env)
    eventually(lambda: rows() >= min(total, killed_at + 5_000), timeout=60, interval=0.01, what="resumed")
    assert second.stop(signal.SIGTERM) == 0, second.log()  # mid-fan-out: stops between chunks, returns the message
    processes.start("worker3", "worker", env=env)
    eventually(lambda: rows() == total, timeout=180, what="fan-out completed after restarts")
    _settle_and_stop(processes, channel, topology)
    distinct = db.execute("SELECT count(DISTINCT (user_id, post_id)) FROM timelines").fetchone()[0]  # type: ignore[index]
    assert rows() == distinct == total
    assert world.problems(db) == []


def test_poison_messages_reach_the_dead_queue_with_reasons_and_do_not_block_others(
        db: psycopg.Connection[Any], channel: Channel, topology: Topology, processes: Processes) -> None:
    author, fan = world.add_users(db, 2)
    bad_type = orjson.dumps({"id": "8d6e3f0e-0c43-4a8e-9a51-2b1f1d0c0a11", "type": "post.exploded",
                             "aggregate_type": "post", "aggregate_id": "1", "occurred_at": "2024-01-01T00:00:00Z",
                             "payload": {}})
    for key, body in (("post.created", b"{not json"), ("post.exploded", bad_type)):
        channel.basic_publish(topology.grouped_exchange, key, body, pika.BasicProperties(delivery_mode=2))
    # A committed event whose post does not exist: inconsistent data, retried and then dead-lettered.
    missing = world.commit_with_outbox(db, ev.Event.new(ev.POST_CREATED, 999_999,
                                                        {"post_id": 999_999, "author_id": author}))
    behind = [world.follow(db, fan, author), world.post(db, author)]
    world.publish(channel, topology, [missing, *behind])
    processes.start("worker", "worker", env=WORKER_ENV)

    letters: list[tuple[pika.BasicProperties, bytes]] = []

    def three_dead() -> bool:
        letters.extend(dead_letters(channel, topology))
        return len(letters) >= 3

    eventually(three_dead, timeout=60, what="three dead letters")
    reasons = {str(p.headers[headers.REASON]).split(":")[0]: p.headers for p, _ in letters}
    assert set(reasons) == {"malformed", "attempts exhausted"}, reasons
    by_reason = sorted(str(p.headers[headers.REASON]) for p, _ in letters)
    assert by_reason[0] == "attempts exhausted: PostMissing: post 999999 does not exist"
    assert by_reason[1].startswith("malformed: body is not JSON")
    assert by_reason[2] == "malformed: unknown event type 'post.exploded'"
    exhausted = next(p for p, _ in letters if "attempts exhausted" in str(p.headers[headers.REASON]))
    assert exhausted.headers[headers.ATTEMPTS] == 3 and exhausted.message_id == str(missing.id)
    eventually(lambda: world.problems(db) == [], what="events behind the poison applied")
    assert world.definition(db, fan) == [behind[1].payload["post_id"]]
    _settle_and_stop(processes, channel, topology)


def test_author_crossing_the_celebrity_threshold_up_and_down_loses_and_doubles_nothing(
        db: psycopg.Connection[Any], channel: Channel, topology: Topology, processes: Processes) -> None:
    rng = random.Random(7)
    author, *fans = world.add_users(db, 8)
    processes.start("worker", "worker", env={**WORKER_ENV, "WALFEED_CELEBRITY_THRESHOLD": "4"})
    followed: list[int] = []
    for step in range(24):  # followers 0 -> 6 -> 1 -> 6: crosses 4 both ways while the author posts
        events = [world.post(db, author)]
        grow = (step // 6) % 2 == 0
        if grow and len(followed) < 6:
            fan = next(f for f in fans if f not in followed)
            followed.append(fan)
            events.append(world.follow(db, fan, author))
        elif not grow and len(followed) > 1:
            events.append(world.unfollow(db, followed.pop(rng.randrange(len(followed))), author))
        world.publish(channel, topology, world.twice_shuffled(events, rng))
        eventually(lambda: drained(channel, topology), what="step processed")
    _settle_and_stop(processes, channel, topology)
    decisions = {r[0] for r in db.execute("SELECT fanned_out FROM posts")}
    assert decisions == {True, False}
    assert world.problems(db) == []
