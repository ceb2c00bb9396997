"""The delivery workers' consumer without RabbitMQ or Postgres: the runtime's Session with the statements on the
connection thread (services/consumer/connection_thread.py, docs/adr/0082) on testkit/broker.py's stand-ins, with
steps in memory. What is ready is admitted in one call, the tries run on the pool, the finished ones are concluded
in one call, copies are published before the ack, a full dead queue parks the letter, a stop returns what is not
sending and settles what is, a bug in the steps returns the messages."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import pika

from services.consumer import headers
from services.consumer.connection_thread import ConnectionThread
from services.consumer.outcomes import ACK, Dead, Hop, Outcome
from services.consumer.session import Session
from services.consumer.settler import Counters
from services.core import events as ev
from services.core.topology import DELIVERY_RETRY_DELAYS_MS, Topology
from services.delivery.broker import DeliveryQueues
from testkit.broker import ManualExecutor, StubBroker, StubChannel, StubConnection

TOPOLOGY = Topology("t")
CHANNEL = "webhook"
SHORTEST, PARK = DELIVERY_RETRY_DELAYS_MS[0], DELIVERY_RETRY_DELAYS_MS[9]


@dataclass(frozen=True)
class Try:
    body: bytes


class Steps:
    """The delivery processor's three steps in memory. `early[body]`: its outcome without a try; `after[body]`: the
    outcome of its try (ACK by default). Every call is recorded; `crash_admit` calls of admit raise first."""

    def __init__(self) -> None:
        self.early: dict[bytes, Outcome] = {}
        self.after: dict[bytes, Outcome] = {}
        self.admitted: list[list[bytes]] = []
        self.sent: list[bytes] = []
        self.concluded: list[list[bytes]] = []
        self.crash_admit = 0
        self.during_send: Callable[[], None] = lambda: None

    def admit(self, messages: Sequence[tuple[bytes, Mapping[str, object] | None]]) -> list[Outcome | Try]:
        self.admitted.append([body for body, _ in messages])
        if self.crash_admit:
            self.crash_admit -= 1
            raise RuntimeError("a bug in admit")
        return [self.early.get(body, Try(body)) for body, _ in messages]

    def send(self, attempt: Try) -> Try:
        self.during_send()
        self.sent.append(attempt.body)
        return attempt

    def conclude(self, tried: Sequence[Try]) -> list[Outcome]:
        self.concluded.append([t.body for t in tried])
        return [self.after.get(t.body, ACK) for t in tried]


class Worker:
    """A delivery Session on a StubBroker whose queues a previous worker declared; `run` consumes until there is
    nothing left to do, then each of `then` in turn on the idle steps that follow, then stops."""

    def __init__(self, *, concurrency: int = 2, dead_max_length: int = 100, at_once: bool = False) -> None:
        self.broker = StubBroker()
        self.stopping = threading.Event()
        self.steps = Steps()
        self.pool = ManualExecutor(at_once=at_once)
        self.concurrency = concurrency
        self.route = DeliveryQueues(TOPOLOGY, CHANNEL, dead_max_length)
        self.route.declare(StubConnection(self.broker).channel())
        self.dead_counted = 0
        self.conn = StubConnection(self.broker)

    def publish(self, *bodies: bytes, hdrs: Mapping[str, object] | None = None) -> None:
        for body in bodies:
            props = pika.BasicProperties(message_id=body.decode(), type=ev.DELIVERY_WEBHOOK, delivery_mode=2,
                                         content_type=ev.CONTENT_TYPE, headers=dict(hdrs) if hdrs else None)
            assert self.broker.publish(TOPOLOGY.events_exchange, ev.DELIVERY_WEBHOOK, body, props)

    def count_dead(self) -> None:
        self.dead_counted += 1

    def session(self, then: Sequence[Callable[[], None]] = ()) -> Session:
        self.stopping.clear()
        steps = deque([*then, self.stopping.set])

        def on_idle() -> None:
            if steps:
                steps.popleft()()

        self.conn = StubConnection(self.broker, [self.pool], on_idle)
        return Session(self.conn, self.route, ConnectionThread(self.steps, self.pool, self.concurrency),
                       self.stopping, prefetch=4 * self.concurrency, park_ms=PARK,
                       counters=Counters(dead=self.count_dead))

    def run(self, then: Sequence[Callable[[], None]] = ()) -> StubChannel:
        self.session(then).run()
        return self.conn.channels[0]

    def queued(self, queue: str) -> list[bytes]:
        return self.broker.bodies(queue)

    @property
    def work_queue(self) -> str:
        return TOPOLOGY.delivery_queue(CHANNEL)


def test_what_is_ready_is_admitted_in_one_call_and_the_finished_tries_are_concluded_in_one() -> None:
    w = Worker(concurrency=2, at_once=True)
    w.publish(b"1", b"2", b"3", b"4", b"5")
    consumer = w.run()
    # Prefetch 8, window 4: four admitted together, the fifth once the first ones are concluded.
    assert w.steps.admitted == [[b"1", b"2", b"3", b"4"], [b"5"]]
    assert w.steps.concluded == [[b"1", b"2", b"3", b"4"], [b"5"]]
    assert w.steps.sent == [b"1", b"2", b"3", b"4", b"5"]
    assert consumer.acks == [(4, True), (5, True)] and not consumer.nacks  # in as few frames as may be
    assert w.queued(w.work_queue) == [] and w.conn.unacked == 0


def test_a_message_settled_without_a_try_is_never_sent() -> None:
    w = Worker()
    w.steps.early[b"1"] = ACK  # already delivered, withdrawn, ...
    w.publish(b"1", b"2")
    consumer = w.run()
    assert w.steps.sent == [b"2"] and w.steps.concluded == [[b"2"]]
    assert consumer.acks == [(1, True), (2, True)] and w.conn.unacked == 0


def test_a_hop_is_published_to_the_retry_queue_of_its_delay_with_its_headers_then_acked() -> None:
    w = Worker()
    w.steps.after[b"1"] = Hop(SHORTEST, {headers.ATTEMPT: 2, headers.DUE: 99, "x-death": [{"queue": "old"}]})
    w.publish(b"1")
    consumer = w.run()
    copy, = w.broker.queues[TOPOLOGY.delivery_retry_queue(CHANNEL, SHORTEST)].messages
    assert copy.body == b"1" and copy.props.headers == {headers.ATTEMPT: 2, headers.DUE: 99}  # no broker history
    assert copy.props.message_id == "1" and copy.props.delivery_mode == 2 and copy.props.expiration is None
    assert consumer.acks == [(1, True)] and w.conn.unacked == 0


def test_a_dead_letter_carries_its_reason_and_attempts_and_no_wait_and_is_counted() -> None:
    w = Worker()
    w.steps.after[b"1"] = Dead("HTTP 400", 3)
    w.publish(b"1", hdrs={headers.DUE: 5, headers.PARKED: "earlier", "traceparent": "00-a"})
    consumer = w.run()
    letter, = w.broker.queues[TOPOLOGY.delivery_dead_queue(CHANNEL)].messages
    sent = letter.props.headers
    assert (sent[headers.REASON], sent[headers.ATTEMPTS], sent["traceparent"]) == ("HTTP 400", 3, "00-a")
    assert isinstance(sent[headers.DEAD_AT], int) and headers.DUE not in sent and headers.PARKED not in sent
    assert w.dead_counted == 1 and consumer.acks == [(1, True)]


def test_a_full_dead_queue_parks_the_letter_in_a_retry_queue_with_its_reason_instead_of_losing_it() -> None:
    w = Worker(dead_max_length=1)
    w.steps.after[b"1"] = Dead("HTTP 400", 1)
    w.steps.after[b"2"] = Dead("HTTP 410", 2)
    w.publish(b"1", b"2")
    consumer = w.run()
    assert w.queued(TOPOLOGY.delivery_dead_queue(CHANNEL)) == [b"1"]
    parked, = w.broker.queues[TOPOLOGY.delivery_retry_queue(CHANNEL, PARK)].messages
    assert parked.body == b"2" and headers.parked_reason(parked.props.headers) == "HTTP 410"
    assert headers.attempt_of(parked.props.headers) == 2
    assert consumer.acks == [(1, True), (2, True)] and not consumer.nacks  # both settled, nothing lost


def test_a_copy_the_broker_refuses_returns_the_original_to_its_queue() -> None:
    w = Worker()
    retry = TOPOLOGY.delivery_retry_queue(CHANNEL, SHORTEST)
    binding = (TOPOLOGY.delivery_settle_exchange, retry, retry)
    w.steps.after[b"1"] = Hop(SHORTEST, {})

    def during_send() -> None:
        if not w.steps.sent:
            w.broker.bindings.remove(binding)  # unroutable now, after the declarations
        else:
            w.steps.after.clear()  # the try after the return succeeds

    w.steps.during_send = during_send
    w.publish(b"1")
    consumer = w.run()
    assert consumer.nacks == [(1, True)]  # returned as it was, then delivered again and acked
    assert consumer.acks == [(2, True)] and w.conn.unacked == 0 and w.queued(w.work_queue) == []
    assert w.steps.sent == [b"1", b"1"]


def test_stopping_returns_what_is_not_sending_and_settles_what_is() -> None:
    w = Worker(concurrency=1)
    w.publish(b"1", b"2", b"3")
    w.steps.during_send = w.stopping.set  # the stop comes while the one thread sends 1
    consumer = w.run()
    # Window 2: 1 and 2 admitted, 3 ready. Stopping returns 3 (ready) and 2 (admitted, not sending); 1 finishes.
    assert w.steps.admitted == [[b"1", b"2"]] and w.steps.concluded == [[b"1"]]
    assert consumer.nacks == [(2, True), (3, True)]
    assert w.steps.sent == [b"1"] and consumer.acks == [(1, True)] and w.conn.unacked == 0
    assert w.queued(w.work_queue) == [b"2", b"3"]  # in their places


def test_a_bug_in_admit_returns_the_messages_and_they_are_worked_on_again() -> None:
    w = Worker()
    w.steps.crash_admit = 1
    w.publish(b"1", b"2")
    consumer = w.run()
    assert w.steps.admitted == [[b"1", b"2"], [b"1", b"2"]]
    assert consumer.nacks == [(1, True), (2, True)] and w.steps.sent == [b"1", b"2"]
    assert w.conn.unacked == 0 and w.queued(w.work_queue) == []


def test_a_lost_connection_leaves_what_was_taken_to_the_broker_which_delivers_it_again() -> None:
    w = Worker()
    w.publish(b"1", b"2")
    session = w.session()
    w.pool.paused = True
    w.conn.on_idle = w.conn.close  # lost while both are admitted, none sent

    try:
        session.run()
    except pika.exceptions.StreamLostError:
        session.abandon()
    assert w.steps.sent == [] and w.queued(w.work_queue) == [b"1", b"2"]
    w.pool.paused = False
    consumer = w.run()
    assert w.steps.sent == [b"1", b"2"] and consumer.acks == [(1, True), (2, True)] and w.conn.unacked == 0
