"""The consumer in-process on a real broker and database, with injected handler failures: retries through the
retry queue, dead letters with reasons, nothing blocked behind a failing message."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pika
import pika.exceptions
import psycopg
import pytest
from pika.adapters.blocking_connection import BlockingChannel as Channel

from services.consumer import batched, headers
from services.consumer.batched import Limits
from services.consumer.messages import Message, Result
from services.consumer.processor import Processor
from services.consumer.retry import RetryPolicy
from services.core import events as ev
from services.core.db import make_pool
from services.core.topology import Topology
from services.worker.fanout import Effects
from testkit.infra import Infra
from testkit.waiting import eventually
from tests.integration.worker import world
from tests.integration.worker.conftest import dead_letters, drained

pytestmark = pytest.mark.integration



class FlakyHandler:
    """Wraps the real effects; a batch holding a chosen event raises, and the event applied alone raises a number
    of times (None = always) before it is applied."""

    def __init__(self, effects: Effects, failures: dict[str, int | None]) -> None:
        self._effects = effects
        self._failures = failures
        self.applied: list[str] = []
        self.attempts: list[tuple[str, int]] = []

    def __call__(self, events: list[ev.Event]) -> Mapping[ev.Event, str | Exception]:
        for event in events:
            left = self._failures.get(str(event.id), 0)
            if left is None or left > 0:
                if left is not None and len(events) == 1:
                    self._failures[str(event.id)] = left - 1
                raise RuntimeError(f"injected failure for {event.id}")
        done = self._effects.apply(events)
        self.applied.extend(str(e.id) for e, label in done.items() if isinstance(label, str))
        return done


class Recorded:
    """The real processor, with each message's attempt recorded and an optional slow batch."""

    def __init__(self, processor: Processor, handler: FlakyHandler, slow: threading.Event | None) -> None:
        self._processor = processor
        self._handler = handler
        self._slow = slow
        self.crashes = 0  # batches to fail with an exception of ours before working normally

    def batch(self, messages: Sequence[Message]) -> list[Result]:
        if self.crashes > 0:
            self.crashes -= 1
            raise RuntimeError("a bug in the processor")
        if self._slow is not None:
            self._slow.wait(6)  # a batch busy for several heartbeat intervals
        results = self._processor.batch(messages)
        self._handler.attempts.extend((r.event_id or "", headers.attempt_of(m.headers))
                                      for m, r in zip(messages, results, strict=True))
        return results

    def large(self, message: Message, event: ev.Event) -> Result:
        return self._processor.large(message, event)


@contextlib.contextmanager
def running_consumer(infra: Infra, database_url: str, topology: Topology, failures: dict[str, int | None],
                     heartbeat: int = 30, slow: threading.Event | None = None, crashes: int = 0,
                     **effects_kw: Any) -> Iterator[FlakyHandler]:
    pool = make_pool(database_url, max_size=3, name="test-consumer")
    pool.open()
    effects = Effects(pool, 10_000, **effects_kw)
    handler = FlakyHandler(effects, failures)
    processor = Processor(handler, RetryPolicy(max_attempts=4, base=0.05, cap=0.1), large=effects.fan_out_large)

    stopping = threading.Event()
    params = pika.URLParameters(infra.amqp_url)
    params.heartbeat = heartbeat
    conn = pika.BlockingConnection(params)
    with ThreadPoolExecutor(2) as batches, ThreadPoolExecutor(1) as large:
        recorded = Recorded(processor, handler, slow)
        recorded.crashes = crashes
        session = batched.session(conn, topology.fanout, recorded, batches,
                                  Limits(batch_size=10, batches=2, prefetch=20), stopping, large=large)
        thread = threading.Thread(target=session.run)
        thread.start()
        try:
            yield handler
        finally:
            stopping.set()
            thread.join(30)
            conn.close()
            pool.close()


def test_fail_twice_then_succeed_is_applied_once_and_nothing_waits_behind_it(
        infra: Infra, database_url: str, db: psycopg.Connection[Any], channel: Channel, topology: Topology) -> None:
    author, fan = world.add_users(db, 2)
    follow = world.follow(db, fan, author)
    flaky, behind = world.post(db, author), world.post(db, author)
    world.publish(channel, topology, [follow, flaky, behind])
    with running_consumer(infra, database_url, topology, {str(flaky.id): 2}) as handler:
        eventually(lambda: str(flaky.id) in handler.applied and drained(channel, topology), what="flaky applied")
    assert handler.applied.count(str(flaky.id)) == 1
    assert [a for e, a in handler.attempts if e == str(flaky.id)] == [1, 2, 3]
    assert handler.applied.index(str(behind.id)) < handler.applied.index(str(flaky.id))
    assert dead_letters(channel, topology) == []
    assert world.problems(db) == []


def test_a_handler_that_always_raises_is_dead_lettered_and_others_proceed(
        infra: Infra, database_url: str, db: psycopg.Connection[Any], channel: Channel, topology: Topology) -> None:
    author, fan = world.add_users(db, 2)
    broken = world.post(db, author)
    behind = [world.follow(db, fan, author), world.post(db, author)]
    world.publish(channel, topology, [broken, *behind])
    letters: list[tuple[pika.BasicProperties, bytes]] = []
    with running_consumer(infra, database_url, topology, {str(broken.id): None}) as handler:
        def dead() -> list[tuple[pika.BasicProperties, bytes]]:
            letters.extend(dead_letters(channel, topology))
            return letters

        eventually(dead, what="dead letter")
        eventually(lambda: {str(e.id) for e in behind} <= set(handler.applied), what="others applied")
    (props, body), = letters
    assert props.message_id == str(broken.id) and body == ev.encode(broken)
    assert props.headers[headers.ATTEMPTS] == 4
    assert props.headers[headers.REASON] == f"attempts exhausted: RuntimeError: injected failure for {broken.id}"
    assert abs(props.headers[headers.DEAD_AT] - time.time()) < 120  # `walfeed dead` ages count from it
    assert "x-death" not in props.headers


def test_heartbeats_flow_while_a_handler_works_for_several_heartbeat_intervals(
        infra: Infra, database_url: str, db: psycopg.Connection[Any], channel: Channel, topology: Topology) -> None:
    author, fan = world.add_users(db, 2)
    events = [world.follow(db, fan, author), world.post(db, author)]
    world.publish(channel, topology, events)
    busy = threading.Event()  # never set: each handler call blocks its full 6 s, the broker expects beats every 1 s
    with running_consumer(infra, database_url, topology, {}, heartbeat=1, slow=busy) as handler:
        eventually(lambda: len(handler.applied) == 2 and drained(channel, topology), timeout=30, what="applied")
    assert world.problems(db) == []


def test_small_posts_are_applied_while_a_large_fanout_is_in_progress(
        infra: Infra, database_url: str, db: psycopg.Connection[Any], channel: Channel, topology: Topology) -> None:
    celebrity, small, *fans = world.add_users(db, 8)
    world.followers_in_bulk(db, celebrity, fans)  # 6 followers: above the chunk size of 2, fanned out apart
    world.follow(db, fans[0], small)
    large = world.post(db, celebrity)
    release = threading.Event()
    chunks: list[int] = []

    def between_chunks() -> bool:  # the large fan-out waits here after its first chunk until the test lets it go
        chunks.append(1)
        release.wait(30)
        return False

    with running_consumer(infra, database_url, topology, {}, chunk_size=2, should_stop=between_chunks) as handler:
        world.publish(channel, topology, [large])
        eventually(lambda: chunks, what="the large fan-out has written its first chunk")
        quick = [world.post(db, small) for _ in range(5)]
        world.publish(channel, topology, quick)
        eventually(lambda: {str(e.id) for e in quick} <= set(handler.applied), what="small posts applied")
        assert not release.is_set() and world.merged(db, fans[-1]) == []  # the large one is still held
        release.set()
        eventually(lambda: drained(channel, topology) and world.problems(db) == [], what="large fan-out done")


def test_a_batch_that_crashes_the_processor_is_returned_and_applied_later(
        infra: Infra, database_url: str, db: psycopg.Connection[Any], channel: Channel, topology: Topology) -> None:
    author, fan = world.add_users(db, 2)
    events = [world.follow(db, fan, author), world.post(db, author)]
    world.publish(channel, topology, events)
    with running_consumer(infra, database_url, topology, {}, crashes=1) as handler:
        eventually(lambda: {str(e.id) for e in events} <= set(handler.applied) and drained(channel, topology),
                   what="applied after the crash")
    assert world.problems(db) == []
