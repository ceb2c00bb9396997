"""The consumer's session without RabbitMQ or Postgres (testkit/broker.py: a stub broker and connection,
thread pools that run a task when told, effects in memory): batches take what is ready and never wait to fill,
acks follow the commit, a failure stays with its message, stopping returns what is not started, and a large post
holds up no small one."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Sequence

import pika
import pytest

from services.consumer import batched, broker, headers
from services.consumer.batched import Limits
from services.consumer.messages import Message, Result
from services.consumer.processor import Processor
from services.consumer.retry import RetryPolicy
from services.consumer.session import Session
from services.core import events as ev
from services.core.topology import Topology
from testkit.broker import ManualExecutor, StubBroker, StubChannel, StubConnection
from testkit.effects import FakeEffects

TOPOLOGY = Topology("t")


def post(post_id: int, author_id: int = 1) -> ev.Event:
    return ev.Event.new(ev.POST_CREATED, post_id, {"post_id": post_id, "author_id": author_id})


class Recording:
    """The real Processor, with the size of every batch recorded; `crashes` batches raise first (a bug of ours)
    and `during_batch` runs inside each batch, as something happening while a thread works."""

    def __init__(self, processor: Processor) -> None:
        self._processor = processor
        self.sizes: list[int] = []
        self.crashes = 0
        self.during_batch: Callable[[], None] = lambda: None

    def batch(self, messages: Sequence[Message]) -> list[Result]:
        self.sizes.append(len(messages))
        self.during_batch()
        if self.crashes:
            self.crashes -= 1
            raise RuntimeError("a bug in the processor")
        return self._processor.batch(messages)

    def large(self, message: Message, event: ev.Event) -> Result:
        return self._processor.large(message, event)


class Worker:
    """A Session on a StubBroker whose queues a previous worker declared; `run` consumes until there is nothing
    left to do, then each of `then` in turn on the idle steps that follow, then stops."""

    def __init__(self, *, batch_size: int = 10, batches: int = 1, prefetch: int = 100, max_attempts: int = 3,
                 dead_max_length: int = broker.DEAD_MAX_LENGTH) -> None:
        self.broker = StubBroker()
        self.stopping = threading.Event()
        self.batches, self.large = ManualExecutor(), ManualExecutor()
        self.effects = FakeEffects(should_stop=self.stopping.is_set)
        self.processor = Recording(Processor(self.effects.apply, RetryPolicy(max_attempts, 0.1, 1.0),
                                             large=self.effects.fan_out_large))
        self.limits = Limits(batch_size, batches, prefetch, park_ms=5000, dead_max_length=dead_max_length)
        broker.declare(StubConnection(self.broker).channel(), TOPOLOGY.fanout, dead_max_length)
        self.conn = StubConnection(self.broker)

    def publish(self, *events: ev.Event) -> None:
        for event in events:
            self.publish_body(ev.encode(event), event.type, str(event.id))

    def publish_body(self, body: bytes, routing_key: str = ev.POST_CREATED, message_id: str = "m") -> None:
        props = pika.BasicProperties(message_id=message_id, type=routing_key, content_type="application/json",
                                     delivery_mode=2)
        assert self.broker.publish(TOPOLOGY.grouped_exchange, routing_key, body, props)

    def publish_group(self, *events: ev.Event) -> None:
        """One message holding `events` (docs/events.md "Groups"; all of one type)."""
        props = pika.BasicProperties(message_id=str(events[0].id), type=events[0].type,
                                     content_type=ev.GROUP_CONTENT_TYPE, delivery_mode=2)
        body = ev.encode_group([ev.encode(e) for e in events])
        assert self.broker.publish(TOPOLOGY.grouped_exchange, events[0].type, body, props)

    def session(self, then: Sequence[Callable[[], None]] = ()) -> Session:
        self.stopping.clear()
        steps = deque([*then, self.stopping.set])

        def on_idle() -> None:
            if steps:  # none left while the stopped session drains
                steps.popleft()()

        self.conn = StubConnection(self.broker, [self.batches, self.large], on_idle)
        return batched.session(self.conn, TOPOLOGY.fanout, self.processor, self.batches, self.limits, self.stopping,
                               large=self.large)

    def run(self, then: Sequence[Callable[[], None]] = ()) -> StubChannel:
        self.session(then).run()
        return self.consumer

    @property
    def consumer(self) -> StubChannel:
        return self.conn.channels[0]

    def queued(self, queue: str) -> list[bytes]:
        return self.broker.bodies(queue)


def test_batches_take_what_is_ready_up_to_the_batch_size_and_never_wait_to_fill() -> None:
    w = Worker(batch_size=10, batches=1)
    w.publish(post(1))
    w.run()
    assert w.processor.sizes == [1]  # alone, at once: no timer waits for company
    w.publish(*(post(i) for i in range(2, 27)))
    w.run()
    assert w.processor.sizes == [1, 1, 10, 10, 4]  # the first to a free thread, then what waited meanwhile
    w = Worker(batch_size=10, batches=2)
    w.publish(post(1), post(2), post(3))
    w.run()
    assert w.processor.sizes == [1, 1, 1]  # two free threads: one each; the third alone once one is free


def test_messages_are_acked_after_their_batch_commits_in_one_multiple_ack() -> None:
    w = Worker(batches=1)
    events = [post(i) for i in range(1, 6)]
    w.publish(*events)

    def still_unacked(committed: list[ev.Event]) -> None:
        unacked = {ev.decode(m.body).id for _, m in w.consumer.unacked.values()}
        assert {e.id for e in committed} <= unacked

    w.effects.on_commit = still_unacked
    channel = w.run()
    assert w.effects.commits == [[events[0].id], [e.id for e in events[1:]]]
    assert channel.acks == [(1, True), (5, True)] and channel.unacked == {} and channel.nacks == []


def test_a_large_post_fans_out_on_its_own_thread_while_small_ones_are_acked_around_it() -> None:
    w = Worker(batches=1)
    first, large, small = post(1), post(2), [post(3), post(4)]
    later = post(5)
    w.effects.large_posts = {2}
    w.large.paused = True  # the large fan-out thread is still at work
    w.publish(first, large, *small)

    def unpause() -> None:
        w.large.paused = False

    channel = w.run(then=[lambda: w.publish(later), unpause])
    assert w.processor.sizes == [1, 3, 1]
    assert w.effects.fanned_out == [large.id]
    # Tag 2 (the large post) is settled last: the small ones around it are acked one by one, never by a multiple
    # ack that would take it along.
    assert channel.acks == [(1, True), (3, False), (4, False), (5, False), (2, True)]
    assert channel.unacked == {} and w.queued(TOPOLOGY.fanout_queue) == []


def test_a_failing_batch_is_applied_again_one_at_a_time_and_only_its_poison_retries_until_dead() -> None:
    w = Worker(batches=1, max_attempts=3)
    first, good, bad, other = post(1), post(2), post(3), post(4)
    w.effects.failing[bad.id] = None
    w.publish(first, good, bad, other)
    channel = w.run()
    assert w.processor.sizes == [1, 3]
    assert w.effects.commits == [[first.id], [good.id], [other.id]]  # the batch of three failed, then one by one
    assert channel.acks == [(1, True), (4, True)]  # the retry copy is published (confirmed) before the ack
    retry, = w.broker.queues[TOPOLOGY.retry_queue].messages
    assert retry.body == ev.encode(bad) and retry.props.headers[headers.ATTEMPT] == 2
    while w.broker.expire(TOPOLOGY.retry_queue):  # the retry delay passes: back to the fan-out queue
        w.run()
    letter, = w.broker.queues[TOPOLOGY.dead_queue].messages
    assert letter.body == ev.encode(bad)
    assert letter.props.headers[headers.ATTEMPTS] == 3
    reason = f"attempts exhausted: ValueError: bigint out of range: {bad.id}"
    assert letter.props.headers[headers.REASON] == reason
    assert "x-death" not in letter.props.headers  # the retry queue's history stays out of the letter
    assert w.queued(TOPOLOGY.fanout_queue) == [] and w.queued(TOPOLOGY.retry_queue) == []


def test_a_batch_whose_processing_raises_returns_its_messages_and_they_are_processed_again() -> None:
    w = Worker(batches=1)
    events = [post(1), post(2)]
    w.processor.crashes = 1
    w.publish(*events)
    channel = w.run()
    assert channel.nacks == [(1, True)]  # returned as it was, not dead-lettered: the bug is ours
    assert sorted(w.effects.commits) == sorted([[events[1].id], [events[0].id]])
    assert channel.unacked == {} and w.queued(TOPOLOGY.fanout_queue) == []


def test_stop_returns_every_message_not_started_in_order_and_settles_the_running_batch() -> None:
    w = Worker(batch_size=2, batches=2)
    events = [post(i) for i in range(1, 7)]
    w.publish(*events)
    w.processor.during_batch = w.stopping.set  # SIGTERM while the first batch is at work
    channel = w.run()
    assert w.processor.sizes == [1]  # the second thread's batch was not started: cancelled
    assert w.effects.commits == [[events[0].id]] and channel.acks == [(1, True)]
    assert channel.nacks == [(tag, True) for tag in range(2, 7)]
    assert w.queued(TOPOLOGY.fanout_queue) == [ev.encode(e) for e in events[1:]]  # in their order, for the next
    assert w.conn.unacked == 0 and w.batches.pending == 0


def test_a_large_post_found_while_stopping_is_returned_not_started() -> None:
    w = Worker(batches=1)
    small, large = post(1), post(2)
    w.effects.large_posts = {2}
    w.publish(small)
    w.run()
    w.publish(large)
    w.processor.during_batch = w.stopping.set
    channel = w.run()
    assert w.effects.fanned_out == [] and w.large.ran == 0
    assert channel.nacks == [(1, True)] and w.queued(TOPOLOGY.fanout_queue) == [ev.encode(large)]


def test_a_full_dead_queue_refuses_the_letter_and_the_worker_parks_it_in_the_retry_queue() -> None:
    w = Worker(dead_max_length=1)
    w.publish_body(b"{not json")
    w.publish_body(b"[]")
    channel = w.run()
    assert len(w.queued(TOPOLOGY.dead_queue)) == 1  # the first letter; the queue is then full
    parked, = w.broker.queues[TOPOLOGY.retry_queue].messages
    assert parked.body == b"[]" and parked.props.expiration == "5000"
    assert parked.props.headers[headers.REASON].startswith("dead queue full: malformed")
    assert channel.unacked == {} and channel.nacks == []  # both settled, neither lost


def test_a_lost_connection_leaves_the_batch_to_the_broker_which_delivers_it_again() -> None:
    w = Worker(batches=1)
    event = post(1)
    w.publish(event)
    session = w.session()
    w.processor.during_batch = w.conn.close  # the connection drops while the batch commits
    with pytest.raises(pika.exceptions.AMQPConnectionError):
        session.run()
    session.abandon()
    w.processor.during_batch = lambda: None
    channel = w.run()
    assert w.effects.commits == [[event.id], [event.id]]  # applied twice: at least once, effects idempotent
    assert channel.acks == [(1, True)] and w.queued(TOPOLOGY.fanout_queue) == []


def test_declaring_over_a_queue_with_other_arguments_fails_as_rabbitmq_does() -> None:
    w = Worker(dead_max_length=10)
    other = Limits(10, 1, 100, dead_max_length=20)
    session = batched.session(StubConnection(w.broker), TOPOLOGY.fanout, w.processor, w.batches, other, w.stopping,
                              large=w.large)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as failure:
        session.run()
    assert failure.value.reply_code == 406


def test_a_groups_events_count_towards_the_batch_size_and_a_group_is_never_split() -> None:
    w = Worker(batch_size=5, batches=1)
    events = [post(i) for i in range(1, 14)]
    w.publish(events[0])
    w.publish_group(*events[1:5])  # 4 events
    w.publish_group(*events[5:12])  # 7 events: more than a batch, taken whole
    w.publish(events[12])
    channel = w.run()
    assert w.processor.sizes == [1, 4, 7, 1]
    assert channel.acks == [(1, True), (2, True), (3, True), (4, True)] and channel.nacks == []
    assert [i for commit in w.effects.commits for i in commit] == [e.id for e in events]


def test_a_failing_event_of_a_group_retries_alone_and_the_group_is_acked() -> None:
    w = Worker(batches=1, max_attempts=3)
    good, bad, other = post(1), post(2), post(3)
    w.effects.failing[bad.id] = None
    w.publish_group(good, bad, other)
    channel = w.run()
    assert channel.acks == [(1, True)] and channel.nacks == []
    assert w.effects.commits == [[good.id], [other.id]]  # the group's batch failed, then one event at a time
    retry, = w.broker.queues[TOPOLOGY.retry_queue].messages
    assert retry.body == ev.encode(bad)  # the event alone, as a message of its own
    assert (retry.props.message_id, retry.props.content_type) == (str(bad.id), ev.CONTENT_TYPE)
    assert retry.props.headers[headers.ATTEMPT] == 2
    while w.broker.expire(TOPOLOGY.retry_queue):
        w.run()
    letter, = w.broker.queues[TOPOLOGY.dead_queue].messages
    assert letter.body == ev.encode(bad) and letter.props.headers[headers.ATTEMPTS] == 3
    assert w.effects.commits == [[good.id], [other.id]]  # the good events were not applied again


def test_a_large_post_of_a_group_goes_back_to_the_queue_alone_and_is_fanned_out_on_its_own_thread() -> None:
    w = Worker(batches=1)
    small, large, other = post(1), post(2), post(3)
    w.effects.large_posts = {2}
    w.publish_group(small, large, other)
    channel = w.run()
    assert w.processor.sizes == [3, 1]  # the group, then the large post alone
    assert w.effects.fanned_out == [large.id]
    assert channel.acks == [(1, True), (2, True)] and channel.nacks == []
    assert w.queued(TOPOLOGY.fanout_queue) == [] and w.queued(TOPOLOGY.retry_queue) == []


def test_a_group_with_a_large_post_found_while_stopping_sends_the_large_post_back_alone() -> None:
    w = Worker(batches=1)
    w.effects.large_posts = {2}
    w.processor.during_batch = w.stopping.set
    small, large = post(1), post(2)
    w.publish_group(small, large)
    channel = w.run()
    assert channel.acks == [(1, True)] and channel.nacks == []  # the small post applied, the group settled
    copy, = w.broker.queues[TOPOLOGY.fanout_queue].messages  # the large post alone, for the next worker
    assert copy.body == ev.encode(large)
    assert (copy.props.message_id, copy.props.content_type) == (str(large.id), ev.CONTENT_TYPE)
    assert w.effects.fanned_out == []


def test_a_large_post_of_a_group_is_sent_back_only_once_its_neighbours_retry_copies_are_taken() -> None:
    w = Worker(batches=1, max_attempts=3)
    bad, large = post(1), post(2)
    w.effects.failing[bad.id] = None
    w.effects.large_posts = {2}
    retry_queue = w.broker.queues[TOPOLOGY.retry_queue]
    retry_queue.full = lambda: True  # type: ignore[method-assign]  # the retry copy is refused: the group returns
    w.publish_group(bad, large)
    batches = []

    def third_stops() -> None:  # the group keeps coming back: stop while it is applied the third time
        batches.append(1)
        if len(batches) == 3:
            w.stopping.set()

    w.processor.during_batch = third_stops
    channel = w.run()
    assert len(channel.nacks) == 3 and channel.acks == []  # returned each time its neighbour's copy was refused
    assert w.queued(TOPOLOGY.fanout_queue) == [ev.encode_group([ev.encode(bad), ev.encode(large)])]  # no copy
